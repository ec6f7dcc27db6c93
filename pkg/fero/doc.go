// Package fero is the public runtime API of fero for Go: open a named
// resource, read it locally, write to it through its partitions' owners,
// and watch its changes.
//
// It is being built. What is here now is the error model every call
// will share: one coded error type, [Error], that crosses the wire with
// its [Code] and message, checked with [CodeOf] or errors.Is / errors.As.
package fero
