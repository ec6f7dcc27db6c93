package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/pkg/fero"
)

// remoteFlags are what every command that talks to a running node takes.
type remoteFlags struct {
	addr       string
	timeout    time.Duration
	tokenFile  string
	secretFile string
	tls        tlsFlags
}

func (f *remoteFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "addr", os.Getenv("FERO_ADDR"), "data address of any node (default $FERO_ADDR)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", os.Getenv("FERO_TOKEN_FILE"), "file whose first line is a client token, for a node that takes tokens (default $FERO_TOKEN_FILE)")
	f.tls.register(cmd.Flags(), false)
	cmd.Flags().StringVar(&f.secretFile, "cluster-secret-file", os.Getenv("FERO_CLUSTER_SECRET_FILE"), "the cluster's secret file, for a node with one: an operator's credential, which forget needs (default $FERO_CLUSTER_SECRET_FILE)")
}

// dial connects to --addr, proving --token-file's token or the cluster
// secret when given.
func (f *remoteFlags) dial(ctx context.Context) (*fero.Remote, error) {
	var opts []fero.DialOption
	switch {
	case f.tokenFile != "":
		tokens, err := fero.ReadSecretFile(f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		opts = append(opts, fero.WithToken(tokens[0]))
	case f.secretFile != "":
		secrets, err := readSecrets(f.secretFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, fero.WithClusterSecret(secrets...))
	}
	if cfg, err := f.tls.config(false); err != nil {
		return nil, err
	} else if cfg != nil {
		opts = append(opts, fero.WithTLS(cfg))
	}
	rc, err := fero.Dial(ctx, f.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.addr, err)
	}
	return rc, nil
}

var errNoAddr = errors.New("no node to talk to: give --addr <data address> (fero serve prints it) or set FERO_ADDR")

// run connects to the node and runs f with the connection, all within
// --timeout.
func (f *remoteFlags) run(cmd *cobra.Command, do func(ctx context.Context, rc *fero.Remote) error) error {
	if f.addr == "" {
		return errNoAddr
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	rc, err := f.dial(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	return do(ctx, rc)
}

const waitUsage = `what the write waits for: none (queued on the node), ack (the owner committed it), majority (a majority of the servers applied it: it survives any owner change) or replicas=K`

func newPut() *cobra.Command {
	var f remoteFlags
	var add, literal bool
	var wait string
	var ifVersion int64
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Set the value at KEY, through the cluster",
		Long: `put sets the value at KEY (an UPDATE, or an ADD with --add, which fails if
KEY has a value) and returns once the write reached --wait (by default
once the owner committed it).

VALUE is read as JSON, except for bare words:
  - a VALUE whose first non-space character is {, [ or " must be valid
    JSON; if it is not, put fails and writes nothing;
  - a JSON number, true, false or null is stored as that JSON value;
  - anything else (fr, 2026-11-26, hello world) is stored as a string.
--string stores VALUE as a string whatever it looks like.

--if-version N makes put a compare-and-set: it writes only if KEY's
top-level key is at version N (0: it has no value; fero get --version
prints it), and otherwise fails, printing the current version.`,
		Example: `  fero put --addr 127.0.0.1:7400 ada '{"name":"Ada","langs":["en"]}'
  fero put --addr 127.0.0.1:7400 ada.langs.- fr       # push the string "fr" onto the array
  fero put --addr 127.0.0.1:7400 ada.age 36           # the number 36
  fero put --addr 127.0.0.1:7400 ada.id '"36"'        # the string "36"
  fero put --addr 127.0.0.1:7400 --string ada.bio '{not JSON}'`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := parseValue(args[1], literal)
			if err != nil {
				return err
			}
			verb := fero.VerbUpdate
			if add || strings.HasSuffix(args[0], ".-") {
				verb = fero.VerbAdd
			}
			w, err := fero.ParseWait(wait)
			if err != nil {
				return fmt.Errorf("--wait: %w", err)
			}
			cond := cmd.Flags().Changed("if-version")
			switch {
			case cond && ifVersion < 0:
				return fmt.Errorf("--if-version %d: a version is 0 (absent) or more", ifVersion)
			case cond && verb == fero.VerbAdd:
				return errors.New("--if-version goes with an UPDATE: drop --add (version 0 creates only)")
			}
			return f.run(cmd, func(ctx context.Context, rc *fero.Remote) error {
				switch {
				case verb == fero.VerbAdd:
					return rc.Add(ctx, args[0], v, w)
				case cond:
					return versionError(rc.UpdateIf(ctx, args[0], fero.Version(ifVersion), v, w))
				}
				return rc.Update(ctx, args[0], v, w)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&add, "add", false, "create only: fail if KEY has a value")
	cmd.Flags().BoolVar(&literal, "string", false, "store VALUE as a string, even if it is JSON")
	cmd.Flags().StringVar(&wait, "wait", "ack", waitUsage)
	cmd.Flags().Int64Var(&ifVersion, "if-version", 0, "write only if KEY is at this version (0: absent); see fero get --version")
	return cmd
}

// versionError adds a failed compare-and-set's current version to its
// message, for the operator to try again with.
func versionError(err error) error {
	if v, ok := fero.VersionOf(err); ok {
		return fmt.Errorf("%w (current version %d)", err, v)
	}
	return err
}

// parseValue is put's rule for VALUE (see its help): JSON, or a bare word
// taken as a string. A VALUE that starts like a JSON object, array or
// string and does not parse is a mistake (a lost quote or brace in the
// shell), so it fails rather than being stored as text.
func parseValue(arg string, literal bool) (any, error) {
	if literal {
		return arg, nil
	}
	var v any
	err := json.Unmarshal([]byte(arg), &v)
	if err == nil {
		return v, nil
	}
	trimmed := strings.TrimLeft(arg, " \t\r\n")
	if trimmed == "" || !strings.ContainsRune(`{["`, rune(trimmed[0])) {
		return arg, nil
	}
	if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
		err = fmt.Errorf("%w at byte %d", err, se.Offset)
	}
	shown := arg
	if len(shown) > 60 {
		shown = strings.ToValidUTF8(shown[:60], "") + "..."
	}
	return nil, fmt.Errorf("VALUE %s is not valid JSON: %v; a VALUE that starts with {, [ or \" must be JSON (to store it as a string, use --string)", shown, err)
}

func newGet() *cobra.Command {
	var f remoteFlags
	var version bool
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value at KEY as JSON on one line, read from its owner",
		Long: `get prints the value at KEY as JSON on one line, read through KEY's owner
(linearizable). With --version it prints the version of KEY's top-level
key first, then a space and the value: the version fero put --if-version
takes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, func(ctx context.Context, rc *fero.Remote) error {
				var v any
				var ok bool
				var ver fero.Version
				var err error
				if version {
					ok, ver, err = rc.GetVersion(ctx, args[0], &v)
				} else {
					ok, err = rc.Get(ctx, args[0], &v)
				}
				if err != nil {
					return err
				}
				if !ok {
					if version {
						return fmt.Errorf("%s: not found (version %d)", args[0], ver)
					}
					return fmt.Errorf("%s: not found", args[0])
				}
				if version {
					fmt.Fprintf(cmd.OutOrStdout(), "%d ", ver)
				}
				return printJSONLine(cmd.OutOrStdout(), v)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&version, "version", false, "print the key's version before its value")
	return cmd
}

func newRm() *cobra.Command {
	var f remoteFlags
	var wait string
	var ifVersion int64
	cmd := &cobra.Command{
		Use:   "rm KEY",
		Short: "Remove the value at KEY (removing what is not there succeeds)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := fero.ParseWait(wait)
			if err != nil {
				return fmt.Errorf("--wait: %w", err)
			}
			cond := cmd.Flags().Changed("if-version")
			if cond && ifVersion < 0 {
				return fmt.Errorf("--if-version %d: a version is 0 (absent) or more", ifVersion)
			}
			return f.run(cmd, func(ctx context.Context, rc *fero.Remote) error {
				if cond {
					return versionError(rc.RemoveIf(ctx, args[0], fero.Version(ifVersion), w))
				}
				return rc.Remove(ctx, args[0], w)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&wait, "wait", "ack", waitUsage)
	cmd.Flags().Int64Var(&ifVersion, "if-version", 0, "remove only if KEY is at this version; see fero get --version")
	return cmd
}

func newTail() *cobra.Command {
	var f remoteFlags
	var count int
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Stream the changes a node applies, one JSON object per line",
		Long: `tail prints every change the node applies to its copy from now on: its
kind (committed by that node as owner, applied from the owner, dropped,
restored), type, key, value, partition, term and offset. It runs until
interrupted, or until --count changes. A node holds up to 4,096 changes
for a slow reader and then drops them; "missed" counts them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.addr == "" {
				return errNoAddr
			}
			ctx := cmd.Context()
			dctx, cancel := context.WithTimeout(ctx, f.timeout)
			rc, err := f.dial(dctx)
			cancel()
			if err != nil {
				return err
			}
			defer rc.Close()
			ctx, stop := context.WithCancel(ctx)
			defer stop()
			n := 0
			enc := json.NewEncoder(cmd.OutOrStdout())
			for ch, err := range rc.Tail(ctx) {
				if err != nil {
					return err
				}
				line := map[string]any{
					"kind": ch.Kind.String(), "partition": ch.Partition, "term": ch.Term, "offset": ch.Offset,
				}
				if ch.Kind != fero.Restored {
					line["type"], line["key"] = ch.Type.String(), ch.Key
				}
				if len(ch.Value) > 0 {
					var v any
					if err := ch.Decode(&v); err == nil {
						line["value"] = jsonable(v)
					}
				}
				if ch.Missed > 0 {
					line["missed"] = ch.Missed
				}
				if err := enc.Encode(line); err != nil {
					return err
				}
				if n++; count > 0 && n >= count {
					return nil
				}
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many changes (0: run until interrupted)")
	return cmd
}

func newStatus() *cobra.Command {
	var f remoteFlags
	var asJSON, parts bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster as one node sees it: members, ownership, this node's partitions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, func(ctx context.Context, rc *fero.Remote) error {
				status := rc.Status
				if parts {
					status = rc.StatusWithPartitions
				}
				st, err := status(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), st)
				}
				return printStatus(cmd.OutOrStdout(), st)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	cmd.Flags().BoolVar(&parts, "partitions", false, "list every partition: role, epochs, keys and digest (compare two nodes' to find where their copies differ)")
	return cmd
}

func newForget() *cobra.Command {
	var f remoteFlags
	var unknown bool
	cmd := &cobra.Command{
		Use:   "forget SERVER-ID...",
		Short: "Remove servers that are gone for good from the cluster's configuration",
		Long: `forget removes a server that will never come back with its ID (its
machine is lost) from the configuration: the servers whose majority makes a
quorum. Crashed and departed servers stay in it, so that a minority cut off
by a split never takes itself for the whole cluster; when too many are gone,
writes fail with "no quorum" until they return or are forgotten.

forget returns once a majority of the new configuration holds the removal,
so that it outlives the node it went through; it fails, saying how many hold
it, if that takes longer than --timeout (run it again to confirm). Servers
that must go together are named in one call: after two of three servers
crash, the survivor alone is no majority of the configuration with either,
so "fero forget b c" through it, not one at a time.

An ID the node it goes through has never heard of (neither in its
configuration nor among its members) is refused, so that a typo is not
recorded as a forgotten server: forget fails naming the servers the node
knows. That node may have missed the server's joining (it was cut off
then): go through a node whose status lists the server, or give
--unknown, which forgets the ID in every life started before now; the
servers that list it drop it when they hear the removal.

Forget servers once the others have caught up (status shows every node's
digest). A forgotten server that is in fact alive but cut off could, with
the rest of its side, make a second majority.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, func(ctx context.Context, rc *fero.Remote) error {
				if !unknown {
					st, err := rc.Status(ctx)
					if err != nil {
						return err
					}
					if err := knownServers(st, args); err != nil {
						return err
					}
				}
				if err := rc.Forget(ctx, args...); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "forgot %s\n", strings.Join(args, ", "))
				return nil
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&unknown, "unknown", false, "forget IDs the node has never heard of too (it may have missed their joining)")
	return cmd
}

// knownServers fails unless the node whose status st is knows every one
// of ids, as a server of its configuration or a member.
func knownServers(st *fero.NodeStatus, ids []string) error {
	known := map[string]bool{}
	var names []string
	for _, c := range st.Configuration {
		if !known[c.ID] {
			known[c.ID] = true
			names = append(names, c.ID)
		}
	}
	for _, m := range st.Members {
		if !m.Client && !known[m.ID] {
			known[m.ID] = true
			names = append(names, m.ID)
		}
	}
	var missing []string
	for _, id := range ids {
		if !known[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(names)
	return fmt.Errorf("%s: not a server node %s knows (its servers: %s); check the spelling, or if it joined while %s was cut off, go through a node whose status lists it, or give --unknown",
		strings.Join(missing, ", "), st.ID, strings.Join(names, ", "), st.ID)
}

func printStatus(w io.Writer, st *fero.NodeStatus) error {
	role := "server"
	if st.Client {
		role = "client"
	}
	fmt.Fprintf(w, "resource %q, as seen by %s node %s (%s)\n", st.Resource, role, st.ID, st.Addr)
	fmt.Fprintf(w, "map %s: %d partitions\n\n", protocol.FormatMapVersion(st.MapVersion), st.Partitions)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tROLE\tSTATUS\tOWNS\tDATA\tGOSSIP\tCONNECTION")
	for _, m := range st.Members {
		r := "server"
		if m.Client {
			r = "client"
		}
		conn := m.Conn
		if m.ID == st.ID {
			conn = "(this node)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, r, m.Status, m.Owned, m.Addr, m.Gossip, conn)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	roles := make([]string, 0, len(st.Roles))
	for r, n := range st.Roles {
		roles = append(roles, fmt.Sprintf("%s %d", r, n))
	}
	sort.Strings(roles)
	var cfg []string
	for _, c := range st.Configuration {
		if !c.Forgotten {
			cfg = append(cfg, c.ID)
		}
	}
	if len(cfg) > 0 {
		quorum := len(cfg)/2 + 1
		fmt.Fprintf(w, "\nconfiguration: %d servers (%s), a quorum is %d\n", len(cfg), strings.Join(cfg, ", "), quorum)
		if !st.Client {
			alive := map[string]bool{st.ID: true}
			for _, m := range st.Members {
				if !m.Client && (m.Status == "connected" || m.Status == "suspect") {
					alive[m.ID] = true
				}
			}
			var missing []string
			for _, id := range cfg {
				if !alive[id] {
					missing = append(missing, id)
				}
			}
			if up := len(cfg) - len(missing); up < quorum {
				fmt.Fprintf(w, "  NO QUORUM: this node sees %d of the %d alive (%s not); writes fail until %d more come back, or an operator forgets the ones gone for good (fero forget %s)\n",
					up, len(cfg), strings.Join(missing, ", "), quorum-up, strings.Join(missing, " "))
			}
		}
	}
	if st.Cluster != "" {
		fmt.Fprintf(w, "cluster: %s", st.Cluster)
		if st.Yields > 0 {
			fmt.Fprintf(w, " (this node's cluster gave way to it %d times)", st.Yields)
		}
		fmt.Fprintln(w)
	}
	if len(st.Other) > 0 {
		ids := make([]string, 0, len(st.Other))
		for id := range st.Other {
			ids = append(ids, id+" in "+st.Other[id])
		}
		sort.Strings(ids)
		fmt.Fprintf(w, "  ANOTHER CLUSTER: refusing %s (two clusters that share no server; see docs/engine.md rule 9)\n", strings.Join(ids, ", "))
	}
	fmt.Fprintf(w, "\nthis node: %d keys, digest %016x; partitions: %s\n", st.Keys, st.Digest, strings.Join(roles, ", "))
	if d := st.Disk; d != nil {
		where := "every partition on disk up to its last offset"
		if d.Behind > 0 {
			where = fmt.Sprintf("%d partitions on disk behind their last offset", d.Behind)
		}
		fmt.Fprintf(w, "data dir: %s, %s, fsync %s (%d syncs); %s\n", d.Dir, sizeString(d.Bytes), d.Fsync, d.Syncs, where)
		if d.Err != "" {
			fmt.Fprintf(w, "  DISK FAILED: %s (the node takes no writes until restarted)\n", d.Err)
		}
	}
	for i, s := range st.Syncing {
		if i == 5 {
			fmt.Fprintf(w, "  ... %d more syncing (--json lists all)\n", len(st.Syncing)-i)
			break
		}
		fmt.Fprintf(w, "  partition %d syncing: %s\n", s.Partition, s.Why)
	}
	s := st.Stats
	fmt.Fprintf(w, "since start: %d committed, %d applied, %d dropped, %d restored, %d ownerships gained, %d lost\n",
		s.Committed, s.Applied, s.Dropped, s.Restored, s.Gained, s.Lost)
	return nil
}

// sizeString spells a byte count for a person: 37.9 kB, 1.2 GB.
func sizeString(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", f, "kMGTP"[i])
}

// printJSONLine prints v as compact JSON on one line, as get and tail do.
func printJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(jsonable(v))
}

// printJSON prints v as indented JSON, as status --json does.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonable(v))
}

// jsonable turns decoded msgpack into values encoding/json accepts: maps
// with non-string keys get string keys, and binary becomes a string when it
// is text.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = jsonable(x)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[fmt.Sprint(k)] = jsonable(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = jsonable(x)
		}
		return out
	}
	return v
}
