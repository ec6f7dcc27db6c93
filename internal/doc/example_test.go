package doc_test

import (
	"fmt"

	"github.com/fero-go/fero/internal/doc"
)

// The owner builds change records, applies each to its own store before
// committing it, and every replica applies the committed records in order.
func Example() {
	owner, _ := doc.New(16)
	replica, _ := doc.New(16)
	b := owner.Builder()
	partition := owner.PartitionOf // in fero, the ring map routes records

	var log []doc.Change
	commit := func(c doc.Change, err error) {
		if err == nil {
			err = owner.Apply(partition(c.Key), c)
		}
		if err != nil {
			fmt.Println("refused:", err)
			return
		}
		log = append(log, c)
	}
	commit(b.Update("users.ada", map[string]any{"name": "Ada", "tags": []string{"math"}}))
	commit(b.Push("users.ada.tags", "engines"))
	commit(b.Add("users.ada.tags.0", "poetry"))
	commit(b.Add("users.ada.name", "Augusta"))
	commit(b.Update("users.ada.name.first", "Ada"))
	commit(b.Remove("users.ada.tags.2"), nil)
	commit(b.Remove("users.bob"), nil) // a no-op, not an error

	for _, c := range log {
		if err := replica.Apply(partition(c.Key), c); err != nil {
			panic(err) // never: the owner checked every change
		}
	}
	tags, _ := replica.Get("users.ada.tags")
	fmt.Println(tags)
	var ada struct {
		Name string `msgpack:"name"`
	}
	_, _ = replica.GetInto("users.ada", &ada)
	fmt.Println(ada.Name)
	fmt.Println(owner.Digest() == replica.Digest())
	// Output:
	// refused: fero: failed_precondition: key already exists: "users.ada.name"
	// refused: fero: failed_precondition: path goes through a scalar: "users.ada.name.first": "users.ada.name" is a string
	// [poetry math]
	// Ada
	// true
}
