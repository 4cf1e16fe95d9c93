package plugin

import "github.com/switchyard-lb/switchyard/core/model"

// Source is what the control loop needs of the watch layer (core/k8s
// implements it).
type Source interface {
	// HasSynced reports whether every cache has synced.
	HasSynced() bool
	// Take returns what changed since the previous Take.
	Take() model.Delta
}
