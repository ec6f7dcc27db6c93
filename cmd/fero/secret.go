package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/spf13/cobra"
)

func newSecret() *cobra.Command {
	return &cobra.Command{
		Use:   "secret",
		Short: "Print a new random cluster secret",
		Long: `secret prints 32 random bytes, hex-encoded, on one line: a cluster secret
for fero serve --cluster-secret-file. Give every node of the cluster the
same file, readable only by the user that runs fero:

  fero secret > cluster.secret && chmod 600 cluster.secret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := make([]byte, 32)
			_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
			_, err := fmt.Fprintln(cmd.OutOrStdout(), hex.EncodeToString(b))
			return err
		},
	}
}
