package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// needNet skips a test that needs root, ip, nft and tc when they are
// missing, saying which.
func needNet(t *testing.T) {
	t.Helper()
	if err := Preflight(); err != nil {
		t.Skipf("skipping real network test: %v", err)
	}
}

// echo serves one echo listener until the test ends.
func echo(t *testing.T, l net.Listener) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// roundTrip sends a line on c and reads it back within d.
func roundTrip(c net.Conn, d time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	msg := []byte("ping\n")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return err
}

// reaches dials addr from node and round-trips on the connection, all
// within d.
func reaches(n *Net, node, addr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := n.Dial(ctx, node, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTrip(c, d)
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, deadline time.Duration, f func() error) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: still failing after %v: %v", what, deadline, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNetPartitionAndHeal builds a real three-node net, checks TCP across
// it, partitions n1 from n2 and n3 (new connections fail, an open one
// stops carrying data, n2 and n3 still talk), heals, and checks that
// Close leaves no namespace, link or table behind.
func TestNetPartitionAndHeal(t *testing.T) {
	needNet(t)
	ctx := context.Background()
	n, err := NewNet(ctx, []string{"n1", "n2", "n3"})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			n.Close()
		}
	})
	addr2 := n.IP("n2") + ":9000"
	l, err := n.Listen("n2", addr2)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, l)

	eventually(t, "n1 reaches n2", 10*time.Second, func() error { return reaches(n, "n1", addr2, 2*time.Second) })
	open, err := n.Dial(ctx, "n1", addr2)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := roundTrip(open, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Nothing routes out: the host's own addresses are unreachable.
	if err := reaches(n, "n1", "1.1.1.1:53", 300*time.Millisecond); err == nil {
		t.Fatal("n1 reached an address outside the net")
	}

	inj := NewInjector(n, nil)
	part := Fault{ID: 1, Kind: KindPartition, Groups: [][]string{{"n1"}, {"n2", "n3"}}}
	if err := inj.Start(ctx, part); err != nil {
		t.Fatal(err)
	}
	rules, err := n.Exec(ctx, "n2", "nft", "list", "table", "inet", nftTable)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("n2's rules during the partition:\n%s", rules)
	// The rules are in place when Start returns: the cut is immediate.
	if err := reaches(n, "n1", addr2, 500*time.Millisecond); err == nil {
		t.Fatal("n1 reached n2 across the partition")
	}
	if err := roundTrip(open, 500*time.Millisecond); err == nil {
		t.Fatal("an open connection carried data across the partition")
	}
	if err := reaches(n, "n3", addr2, 5*time.Second); err != nil {
		t.Fatalf("n3 and n2 are on the same side but: %v", err)
	}

	// One-way: n3's packets to n2 dropped. TCP needs both ways, so n3
	// cannot connect; nothing else changes.
	oneway := Fault{ID: 2, Kind: KindOneWay, From: "n3", To: "n2"}
	if err := inj.Start(ctx, oneway); err != nil {
		t.Fatal(err)
	}
	if err := reaches(n, "n3", addr2, 500*time.Millisecond); err == nil {
		t.Fatal("n3 reached n2 with its packets to n2 dropped")
	}
	if err := inj.Undo(ctx, oneway); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n3 reaches n2 after the one-way drop", 10*time.Second, func() error { return reaches(n, "n3", addr2, 2*time.Second) })

	if err := inj.UndoAll(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n1 reaches n2 after the heal", 10*time.Second, func() error { return reaches(n, "n1", addr2, 2*time.Second) })
	// The connection opened before the split works again: TCP
	// retransmits what was lost.
	eventually(t, "the open connection carries data after the heal", 30*time.Second, func() error { return roundTrip(open, 2*time.Second) })

	if err := n.SetShape(ctx, "n1", Shape{RateKbit: 256}); err != nil {
		t.Fatal(err)
	}
	if err := n.SetShape(ctx, "n1", Shape{}); err != nil {
		t.Fatal(err)
	}

	prefix := n.Prefix()
	l.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	left, err := Leftovers(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("Close left behind: %v", left)
	}
}

// TestSweepRemovesDeadRunsOnly: a namespace named for a harness that is
// gone is removed by the next NewNet; one of a live harness stays.
func TestSweepRemovesDeadRunsOnly(t *testing.T) {
	needNet(t)
	ctx := context.Background()
	// A pid that surely ran and is gone: a child that has exited.
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("%s%d-1-n1", NamePrefix, c.Process.Pid)
	live := fmt.Sprintf("%s%d-999-n1", NamePrefix, os.Getpid())
	for _, ns := range []string{dead, live} {
		if _, err := run(ctx, "", "ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = run(ctx, "", "ip", "netns", "del", dead)
		_, _ = run(ctx, "", "ip", "netns", "del", live)
	})
	if err := Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(netnsDir + "/" + dead); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Sweep left %s (its pid %d is gone): %v", dead, c.Process.Pid, err)
	}
	if _, err := os.Stat(netnsDir + "/" + live); err != nil {
		t.Fatalf("Sweep removed %s, whose harness (this test) runs: %v", live, err)
	}
}
