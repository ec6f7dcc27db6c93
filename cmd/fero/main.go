// Command fero is the operator's tool for a fero cluster.
//
//	fero serve users                      # a generic server node for the resource "users"
//	fero serve users --seeds 127.0.0.1:7946
//	fero put   --addr 127.0.0.1:7400 ada '{"name":"Ada"}'
//	fero get   --addr 127.0.0.1:7400 ada
//	fero rm    --addr 127.0.0.1:7400 ada
//	fero tail  --addr 127.0.0.1:7400
//	fero status --addr 127.0.0.1:7400
//
// serve runs a node that holds dynamic documents and answers the built-in
// verbs. The other commands connect to any node's data address (which
// serve prints, and $FERO_ADDR can hold): the node forwards what it does
// not own to the owner.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "fero:") {
			msg = "fero: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "fero",
		Short: "Run and inspect fero clusters",
		Long: `fero runs a generic server node for a resource, and reads, writes, tails
and inspects a running cluster through any of its nodes.

Values given to put are JSON, or a bare word taken as a string ("fero put
--help" has the rule); they travel as msgpack. get and tail print JSON, one
value per line.
Keys are paths: "ada.tags.0" is element 0 of the tags array of the key "ada".`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServe(), newPut(), newGet(), newRm(), newTail(), newStatus(), newForget(), newBackup(), newRestore(), newSecret(), newCerts())
	return root
}
