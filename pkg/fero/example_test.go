package fero_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/fero-go/fero/pkg/fero"
)

// A handler answers with a coded error; the caller, on any node, checks
// the code.
func ExampleCodeOf() {
	var errNotApproved = fero.NewError(403, "user not approved")
	err := fmt.Errorf("login: %w", errNotApproved)

	fmt.Println(fero.CodeOf(err))
	fmt.Println(errors.Is(err, errNotApproved))
	var fe *fero.Error
	if errors.As(err, &fe) {
		fmt.Println(fe.Message())
	}
	// Output:
	// code_403
	// true
	// user not approved
}

// A client node that holds a client token but not the cluster secret
// attaches to the servers (fero serve prints their data addresses): it
// keeps a full copy and writes straight to the owners, and the servers
// take nothing else from it.
func ExampleWithAttach() {
	ctx := context.Background()
	token, err := fero.ReadSecretFile("client.token") // the servers' --token-file holds it too
	if err != nil {
		log.Fatal(err)
	}
	users, err := fero.Open(ctx, "users", fero.Client(),
		fero.WithAttach("10.0.0.5:7400", "10.0.0.6:7400"), fero.WithToken(token[0]))
	if err != nil {
		log.Fatal(err) // a token the servers refuse fails here, permission denied
	}
	defer users.Close()
	if err := users.Update(ctx, "ada", map[string]any{"name": "Ada"}, fero.Majority); err != nil {
		log.Fatal(err)
	}
}

// A stream on one cart sees that cart's changes and nothing of the
// others: the node hands it only the changes under carts.ada.
func ExamplePrefix() {
	ctx := context.Background()
	carts, err := fero.Open(ctx, "shop")
	if err != nil {
		log.Fatal(err)
	}
	defer carts.Close()
	for ch := range carts.Changes(ctx, fero.Prefix("carts.ada")) {
		fmt.Println(ch.Type, ch.Key) // carts.ada, carts.ada.items.0, never carts.adam
	}
}

// A typed watch yields one key's changes with their values decoded.
func ExampleMap_Watch() {
	ctx := context.Background()
	type Cart struct {
		Items []string `msgpack:"items"`
	}
	carts, err := fero.OpenMap[Cart](ctx, "carts")
	if err != nil {
		log.Fatal(err)
	}
	defer carts.Close()
	for ch, cart := range carts.Watch(ctx, "ada") {
		switch {
		case ch.Kind == fero.Restored: // a snapshot replaced ada's partition
			cart, _, _ = carts.Get("ada")
		case ch.Kind == fero.Dropped: // cart is what was undone
			cart, _, _ = carts.Get("ada")
		case ch.Type == fero.Remove:
			fmt.Println("ada's cart is gone")
			continue
		}
		fmt.Println("ada's cart holds", cart.Items)
	}
}
