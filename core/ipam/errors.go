package ipam

import "errors"

// Errors returned by the Allocator, wrapped with what failed; test them
// with errors.Is. The controller turns them into AllocationFailed Events.
var (
	// ErrInvalidRequest: the request contradicts itself (two requested
	// addresses of one family, a family the Service does not use, ...).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNoPool: no pool can serve the Service: the requested address is
	// outside every pool, the named pool does not exist or does not allow
	// the Service, or no auto-assign pool allows it or has the family.
	ErrNoPool = errors.New("no usable pool")
	// ErrConflict: the requested address is held by a Service that does
	// not share it with this one (sharing key, backend key or ports).
	ErrConflict = errors.New("address conflict")
	// ErrPoolExhausted: every usable pool is full for a family.
	ErrPoolExhausted = errors.New("pool exhausted")
)
