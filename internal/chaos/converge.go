// The end of a run: waiting until the running servers agree on the state
// (converge), and saving what they said (status.json).

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// converge waits until every running server reports the same digest and
// key count twice in a row, or until Converge; servers that never agree
// are an anomaly.
func (r *runner) converge(ctx context.Context, cl *Cluster) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Converge)
	defer cancel()
	start := time.Now()
	var last, prev string
	for {
		last = r.digests(ctx, cl)
		if last != "" && last == prev && !strings.Contains(last, "error") && agree(last) {
			r.logf("servers agree after %v: %s", time.Since(start).Round(time.Millisecond), last)
			return
		}
		prev = last
		if sleepUntil(ctx, time.Now().Add(500*time.Millisecond)) != nil {
			break
		}
	}
	r.logf("servers still disagree after %v: %s", r.cfg.Converge, last)
	r.res.Anomalies = append(r.res.Anomalies, Anomaly{
		Kind:    "servers-disagree",
		Message: fmt.Sprintf("after the heal, the servers' copies did not agree within %v: %s%s", r.cfg.Converge, last, r.partsDiffer(cl)),
	})
}

// partsDiffer lists the partitions (at most 10) whose digests differ
// between the running servers, with each server's role, epochs and keys
// there: what a servers-disagree anomaly needs to be read.
func (r *runner) partsDiffer(cl *Cluster) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sts := map[string]*Status{}
	for _, n := range cl.Running() {
		if st, _, err := cl.StatusFull(ctx, n); err == nil && len(st.Parts) > 0 {
			sts[n] = st
		}
	}
	nodes := slices.Sorted(maps.Keys(sts))
	if len(nodes) < 2 {
		return ""
	}
	var b strings.Builder
	shown := 0
	for p := range sts[nodes[0]].Parts {
		var ds []uint64
		for _, n := range nodes {
			if p < len(sts[n].Parts) {
				ds = append(ds, sts[n].Parts[p].Digest)
			}
		}
		slices.Sort(ds)
		if len(slices.Compact(ds)) <= 1 {
			continue
		}
		if shown == 10 {
			b.WriteString("\n    (more partitions differ)")
			break
		}
		shown++
		fmt.Fprintf(&b, "\n    partition %d:", p)
		for _, n := range nodes {
			if p < len(sts[n].Parts) {
				x := sts[n].Parts[p]
				fmt.Fprintf(&b, " %s %s accepted %s at %s, %d keys, %016x;", n, x.Role, x.Accepted, x.Position, x.Keys, x.Digest)
			}
		}
	}
	return b.String()
}

// digests asks every running server for its digest: "n1=<digest>/<keys>
// n2=…", sorted by node.
func (r *runner) digests(ctx context.Context, cl *Cluster) string {
	nodes := cl.Running()
	out := make([]string, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			t0 := time.Now()
			st, text, err := cl.Status(sctx, n)
			if err != nil {
				// The error, once per node and round, for the harness log;
				// the digest line keeps the short form agree() compares.
				r.logf("status of %s (after %v): %v %s", n, time.Since(t0).Round(time.Millisecond), err, strings.TrimSpace(text))
				out[i] = n + "=error"
				return
			}
			out[i] = fmt.Sprintf("%s=%016x/%d", n, st.Digest, st.Keys)
		})
	}
	wg.Wait()
	return strings.Join(out, " ")
}

// agree reports whether every "node=value" of s has the same value.
func agree(s string) bool {
	var first string
	for i, f := range strings.Fields(s) {
		_, v, _ := strings.Cut(f, "=")
		if i == 0 {
			first = v
		} else if v != first {
			return false
		}
	}
	return first != ""
}

// saveStatus writes every running server's full status to status.json.
func (r *runner) saveStatus(ctx context.Context, cl *Cluster) {
	all := map[string]json.RawMessage{}
	for _, n := range cl.Running() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, raw, err := cl.StatusFull(sctx, n)
		cancel()
		if err != nil {
			raw = strconv.Quote(err.Error())
		}
		all[n] = json.RawMessage(raw)
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(r.cfg.Out, "status.json"), b, 0o644)
	}
	if err != nil {
		r.logf("status.json: %v", err)
	}
}
