// Command epp is a toy endpoint picker: GET /pick?adapter=NAME returns the endpoint to use.
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"

	"example.com/epp/internal/picker"
	"example.com/epp/internal/pool"
	"example.com/epp/internal/scorer"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "9000"
	}
	list := os.Getenv("EPP_ENDPOINTS")
	if list == "" {
		list = "pod-a=10.0.0.1:8000,pod-b=10.0.0.2:8000,pod-c=10.0.0.3:8000"
	}
	eps, err := pool.ParseList(list)
	if err != nil {
		log.Fatal(err)
	}
	p := pool.New(eps...)

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/pick", func(w http.ResponseWriter, r *http.Request) {
		res, err := picker.Pick(p.Snapshot(), scorer.Default, r.URL.Query().Get("adapter"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	mux.HandleFunc("/report", func(w http.ResponseWriter, r *http.Request) {
		var e pool.Endpoint
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&e) != nil || e.Name == "" {
			http.Error(w, "POST a JSON endpoint with a name", http.StatusBadRequest)
			return
		}
		p.Update(e)
		w.WriteHeader(http.StatusNoContent)
	})
	log.Printf("epp listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, mux))
}
