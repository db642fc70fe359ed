package rank

import (
	"testing"

	"example.com/ranker/internal/features"
)

func TestTitleHitWins(t *testing.T) {
	docs := []features.Doc{
		{ID: "body", Title: "other", Body: "go go"},
		{ID: "title", Title: "go", Body: ""},
	}
	got := Rank(docs, "go")
	if got[0].ID != "title" {
		t.Fatalf("got %+v, want title first", got)
	}
}
