// Package pool holds the model-server endpoints the picker chooses from.
package pool

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Endpoint is one model server with its last reported load.
type Endpoint struct {
	Name          string  `json:"name"`
	Address       string  `json:"address"`
	QueueDepth    int     `json:"queue_depth"`
	KVCacheUsage  float64 `json:"kv_cache_usage"`
	ActiveAdapter string  `json:"active_adapter,omitempty"`
}

// Pool is a set of endpoints, safe for concurrent use.
type Pool struct {
	mu        sync.RWMutex
	endpoints map[string]Endpoint
}

// New returns a pool with the given endpoints.
func New(eps ...Endpoint) *Pool {
	p := &Pool{endpoints: make(map[string]Endpoint)}
	for _, e := range eps {
		p.endpoints[e.Name] = e
	}
	return p
}

// ParseList parses "name=host:port,name2=host:port" into endpoints.
func ParseList(s string) ([]Endpoint, error) {
	var out []Endpoint
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("bad endpoint %q (want name=host:port)", item)
		}
		out = append(out, Endpoint{Name: name, Address: addr})
	}
	return out, nil
}

// Update replaces the load figures of one endpoint; unknown names are added.
func (p *Pool) Update(e Endpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endpoints[e.Name] = e
}

// Snapshot returns the endpoints sorted by name.
func (p *Pool) Snapshot() []Endpoint {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]Endpoint, 0, len(p.endpoints))
	for _, e := range p.endpoints {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
