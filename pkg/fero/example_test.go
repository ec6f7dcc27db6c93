package fero_test

import (
	"errors"
	"fmt"

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
