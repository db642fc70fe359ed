package picker

import (
	"testing"

	"example.com/epp/internal/pool"
	"example.com/epp/internal/scorer"
)

func TestPickPrefersShortQueue(t *testing.T) {
	eps := []pool.Endpoint{{Name: "a", QueueDepth: 5}, {Name: "b", QueueDepth: 1}}
	r, err := Pick(eps, scorer.Default, "")
	if err != nil || r.Endpoint.Name != "b" {
		t.Fatalf("got %+v, %v; want b", r, err)
	}
}

func TestPickEmpty(t *testing.T) {
	if _, err := Pick(nil, scorer.Default, ""); err != ErrEmpty {
		t.Fatalf("got %v, want ErrEmpty", err)
	}
}
