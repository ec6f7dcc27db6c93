package ferotest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fero-go/fero/pkg/fero"
	"github.com/fero-go/fero/pkg/fero/ferotest"
)

// A test of a service: three servers answer its verb, a client calls it,
// and every node ends up with what the handler wrote. In a test, pass the
// test's *testing.T to NewCluster; an example has none, so t stands in.
func Example() {
	t := newExampleT()
	defer t.cleanup()

	// The service: GREET stores a greeting under the key, on its owner.
	greet := func(ctx context.Context, req *fero.Request) (any, error) {
		var name string
		if err := req.Decode(&name); err != nil {
			return nil, err
		}
		msg := "hello, " + name
		if err := req.Resource().Update(ctx, req.Key, msg, fero.Majority); err != nil {
			return nil, err
		}
		return msg, nil
	}
	c := ferotest.NewCluster(t, "greetings", ferotest.WithNodeOptions(fero.WithHandler(greet)))
	client := c.Add(fero.Client())
	c.WaitSettled()

	ctx := context.Background()
	var reply string
	if err := client.Call(ctx, "GREET", "ada", "Ada", &reply); err != nil {
		t.Fatalf("GREET: %v", err)
	}
	fmt.Println(reply)

	c.WaitConverged()
	for _, r := range c.Nodes() {
		v, _ := r.Get("ada")
		fmt.Printf("%s: %v\n", r.ID(), v)
	}
	// Output:
	// hello, Ada
	// node-1: hello, Ada
	// node-2: hello, Ada
	// node-3: hello, Ada
	// node-4: hello, Ada
}

// exampleT stands in for a test's *testing.T in the example: it runs the
// cleanups when the example ends and panics where a test would fail.
// Only the methods the kit calls are implemented.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()                           {}
func (t *exampleT) Log(...any)                        {}
func (t *exampleT) Logf(string, ...any)               {}
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
