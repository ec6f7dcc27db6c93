//go:build tools

// Package deps pins modules fero's packages do not import, for the
// modules that depend on fero. Built only with the tag "tools" (never):
// go mod tidy reads it all the same, so go.mod keeps the pins.
//
// google.golang.org/genproto: pebble's cockroachdb/errors requires a
// genproto from before its googleapis packages became modules of their
// own, and a module that adds an OpenTelemetry exporter over gRPC beside
// fero then found google.golang.org/genproto/googleapis/api/annotations
// in two modules ("ambiguous import"). Requiring a genproto from after
// the split settles it for every module that requires fero.
package deps

import _ "google.golang.org/genproto/protobuf/field_mask"
