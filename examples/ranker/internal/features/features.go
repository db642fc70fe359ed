// Package features turns a document and a query into numeric features.
package features

import (
	"strings"
	"unicode"
)

// Doc is one candidate document.
type Doc struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Body  string `json:"body"`
}

// Vector is the feature set the ranker scores.
type Vector struct {
	TitleHits int
	BodyHits  int
	Length    int
}

// Tokens splits s into lower-case words.
func Tokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// Extract counts query-term hits in the title and body of d.
func Extract(d Doc, query string) Vector {
	terms := map[string]bool{}
	for _, t := range Tokens(query) {
		terms[t] = true
	}
	v := Vector{}
	for _, t := range Tokens(d.Title) {
		if terms[t] {
			v.TitleHits++
		}
	}
	body := Tokens(d.Body)
	for _, t := range body {
		if terms[t] {
			v.BodyHits++
		}
	}
	v.Length = len(body)
	return v
}
