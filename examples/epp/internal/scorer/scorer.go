// Package scorer ranks endpoints for one request; lower scores are better.
package scorer

import "example.com/epp/internal/pool"

// Weights tune how much each load signal counts.
type Weights struct {
	Queue   float64
	KVCache float64
	Adapter float64
}

// Default is the weighting the picker starts with.
var Default = Weights{Queue: 1.0, KVCache: 4.0, Adapter: 2.0}

// Score returns the cost of sending a request for adapter to e.
func (w Weights) Score(e pool.Endpoint, adapter string) float64 {
	s := w.Queue*float64(e.QueueDepth) + w.KVCache*e.KVCacheUsage
	if adapter != "" && e.ActiveAdapter != adapter {
		s += w.Adapter
	}
	return s
}
