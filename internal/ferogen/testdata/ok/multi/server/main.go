// Command server is where the multi case's stub goes: a package that
// exists already.
package main

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/multi/gen"
	"github.com/fero-go/fero/pkg/fero"
)

func main() {
	r, err := fero.Open(context.Background(), gen.SessionsResourceName, gen.RegisterSessions(&SessionsService{}))
	if err == nil {
		_ = r.Close()
	}
}
