package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/pkg/fero"
)

func newBackup() *cobra.Command {
	var f remoteFlags
	var out string
	cmd := &cobra.Command{
		Use:   "backup --out FILE",
		Short: "Write a backup of the resource: every partition at one commit, from a running cluster",
		Long: `backup asks the node at --addr for every partition of its resource, which
it takes from each partition's owner at one commit (no pause of writes),
and writes them to --out with a SHA-256 of the whole file. It writes to a
temporary file beside --out and renames it once complete, so --out is
either a whole backup or absent. Progress goes to stderr.

fero restore FILE seeds a fresh cluster from it (docs/operations.md,
Backup and restore).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("--out FILE is required")
			}
			return f.run(cmd, func(ctx context.Context, rc *fero.Remote) error {
				tmp, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".partial-*")
				if err != nil {
					return err
				}
				defer os.Remove(tmp.Name()) // gone once renamed
				p := newProgress(cmd.ErrOrStderr(), "backup")
				st, err := rc.Backup(ctx, tmp, p.report)
				if err == nil {
					err = tmp.Sync()
				}
				if cerr := tmp.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
				if err := os.Rename(tmp.Name(), out); err != nil {
					return err
				}
				info, err := os.Stat(out)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "backup of %q: %d partitions, %d keys, %s in %s, took %v; digest %016x\n",
					st.Resource, st.Partitions, st.Keys, sizeString(info.Size()), out, st.Took.Round(time.Millisecond), st.Digest)
				return nil
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&out, "out", "", "the backup file to write")
	// A backup of a large resource takes longer than a put.
	_ = cmd.Flags().Set("timeout", "1h")
	cmd.Flags().Lookup("timeout").DefValue = "1h"
	return cmd
}

func newRestore() *cobra.Command {
	var f remoteFlags
	var force bool
	var concurrency int
	var settle time.Duration
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Seed a fresh cluster from a backup",
		Long: `restore checks FILE whole (its SHA-256 and every record) and refuses it,
writing nothing, if it is damaged. Then it writes every key of the backup
into the resource through the node at --addr, each a Majority write, and
waits until that node's digest equals the backup's (--settle).

It refuses a resource that already holds keys, or has another number of
partitions, unless --force. Versions start anew (each key's version is
its restored write's), and the exactly-once table does not carry over.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer file.Close()
			return f.run(cmd, func(ctx context.Context, rc *fero.Remote) error {
				p := newProgress(cmd.ErrOrStderr(), "restore")
				st, err := rc.Restore(ctx, file, fero.RestoreOptions{Force: force, Concurrency: concurrency, Progress: p.report})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "restored %q: %d partitions, %d keys in %v\n", st.Resource, st.Partitions, st.Keys, st.Took.Round(time.Millisecond))
				return awaitDigest(ctx, cmd.OutOrStdout(), rc, st.Digest, settle)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "restore into a resource that holds keys or has another number of partitions")
	cmd.Flags().IntVar(&concurrency, "concurrency", 64, "writes in flight at once")
	cmd.Flags().DurationVar(&settle, "settle", time.Minute, "how long to wait, once every key is written, for the node's digest to equal the backup's")
	_ = cmd.Flags().Set("timeout", "1h")
	cmd.Flags().Lookup("timeout").DefValue = "1h"
	return cmd
}

// awaitDigest waits until the node rc talks to holds digest want.
func awaitDigest(ctx context.Context, w io.Writer, rc *fero.Remote, want uint64, settle time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	var last string
	for {
		st, err := rc.Status(ctx)
		if err == nil && st.Digest == want {
			fmt.Fprintf(w, "digest %016x: the node's copy equals the backup\n", want)
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("the node's digest is %016x, the backup's %016x", st.Digest, want)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restore: after %v, %s", settle, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// progress prints a backup's or restore's progress to w, at most once a
// second and at the end.
type progress struct {
	w     io.Writer
	what  string
	began time.Time
	last  time.Time
}

func newProgress(w io.Writer, what string) *progress {
	return &progress{w: w, what: what, began: time.Now()}
}

func (p *progress) report(done, total, keys int, bytes int64) {
	if now := time.Now(); done == total || now.Sub(p.last) >= time.Second {
		p.last = now
		fmt.Fprintf(p.w, "%s: %d/%d partitions, %d keys, %s, %v\n", p.what, done, total, keys, sizeString(bytes), time.Since(p.began).Round(100*time.Millisecond))
	}
}
