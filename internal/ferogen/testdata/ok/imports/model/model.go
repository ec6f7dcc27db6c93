// Package fero is the model of the imports case: its name is also
// pkg/fero's, so the generated code imports it under another.
package fero

import "time"

type Item struct {
	Key   string            `msgpack:"key" fero:"key"`
	Tags  map[string][]byte `msgpack:"tags"`
	Since time.Time         `msgpack:"since"`
}

type Stock struct {
	Count int `msgpack:"count"`
}
