// Command ranker ranks a fixed corpus: GET /rank?q=QUERY returns the documents best first.
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"

	"example.com/ranker/internal/features"
	"example.com/ranker/internal/rank"
)

var corpus = []features.Doc{
	{ID: "d1", Title: "Building container images", Body: "buildah builds images without a daemon"},
	{ID: "d2", Title: "Go modules", Body: "a module is a collection of go packages"},
	{ID: "d3", Title: "Caching builds", Body: "a build cache makes go builds fast"},
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "9000"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/rank", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rank.Rank(corpus, r.URL.Query().Get("q")))
	})
	log.Printf("ranker listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, mux))
}
