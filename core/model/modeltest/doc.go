// Package modeltest owns the one set of model builders the tests share:
// addresses, the endpoints of a port "http" (TCP 8080 on the backends) in
// each of their states, and Services of each type on port "http" 80, so
// that every package's tests build the same fixtures the same way.
//
// It builds values only: each call returns a fresh value the test may
// change. Malformed addresses panic, as fixtures are constants.
package modeltest
