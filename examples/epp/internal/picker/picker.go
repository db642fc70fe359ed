// Package picker chooses the endpoint with the lowest score.
package picker

import (
	"errors"

	"example.com/epp/internal/pool"
	"example.com/epp/internal/scorer"
)

// ErrEmpty is returned when the pool has no endpoints.
var ErrEmpty = errors.New("no endpoints")

// Result is one decision.
type Result struct {
	Endpoint pool.Endpoint `json:"endpoint"`
	Score    float64       `json:"score"`
}

// Pick returns the best endpoint for adapter; ties go to the first by name.
func Pick(eps []pool.Endpoint, w scorer.Weights, adapter string) (Result, error) {
	if len(eps) == 0 {
		return Result{}, ErrEmpty
	}
	best := Result{Endpoint: eps[0], Score: w.Score(eps[0], adapter)}
	for _, e := range eps[1:] {
		if s := w.Score(e, adapter); s < best.Score {
			best = Result{Endpoint: e, Score: s}
		}
	}
	return best, nil
}
