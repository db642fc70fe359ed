// Package rank orders documents by a linear score over their features.
package rank

import (
	"sort"

	"example.com/ranker/internal/features"
)

// Scored is a document with its score.
type Scored struct {
	ID    string  `json:"id"`
	Score float64 `json:"score"`
}

// Score is the ranking function an agent would tune.
func Score(v features.Vector) float64 {
	return 3*float64(v.TitleHits) + float64(v.BodyHits) - 0.01*float64(v.Length)
}

// Rank returns docs ordered best first; ties keep input order.
func Rank(docs []features.Doc, query string) []Scored {
	out := make([]Scored, len(docs))
	for i, d := range docs {
		out[i] = Scored{ID: d.ID, Score: Score(features.Extract(d, query))}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Score > out[j].Score })
	return out
}
