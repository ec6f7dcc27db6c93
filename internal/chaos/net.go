package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// NamePrefix starts the name of every namespace the harness creates.
const NamePrefix = "fchaos-"

// Link is the name of every node's interface inside its namespace (names
// are per namespace, so every node can have the same one).
const Link = "eth0"

// netnsDir is where ip-netns(8) keeps named namespaces.
const netnsDir = "/run/netns"

// nets counts the nets this process made, for their names.
var nets atomic.Uint32

// Net is one run's private network: a bridge in a namespace of its own
// and one namespace per node, each joined to the bridge by a veth pair,
// with an address on a /24 that has no route out. Close removes it all.
type Net struct {
	prefix string // fchaos-<pid>-<run>-
	subnet int    // the X of 10.201.X.0/24
	nodes  []string
	ip     map[string]string
	netem  bool

	mu     sync.Mutex
	closed bool
}

// nodeName is what a node may be called: it becomes part of a namespace's
// and an interface's name.
var nodeName = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

// NewNet sweeps what killed runs left behind, then builds a network with
// the given nodes (at most 250; names like n1, c2). On error, whatever it
// had built is removed.
func NewNet(ctx context.Context, nodes []string) (_ *Net, err error) {
	if len(nodes) == 0 || len(nodes) > 250 {
		return nil, fmt.Errorf("chaos: a net has 1 to 250 nodes, not %d", len(nodes))
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if !nodeName.MatchString(n) || n == "br" {
			return nil, fmt.Errorf("chaos: node name %q: want a lower-case letter, then up to 7 letters or digits, not \"br\"", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("chaos: node %q named twice", n)
		}
		seen[n] = true
	}
	if err := Sweep(ctx); err != nil {
		return nil, err
	}
	seq := nets.Add(1)
	pid := os.Getpid()
	n := &Net{
		prefix: fmt.Sprintf("%s%d-%d-", NamePrefix, pid, seq),
		// The /24 is invisible outside the run's namespaces, so two runs
		// that pick the same one cannot meet; varying it only keeps their
		// logs apart.
		subnet: (pid*7+int(seq))%250 + 1,
		nodes:  append([]string(nil), nodes...),
		ip:     map[string]string{},
	}
	defer func() {
		if err != nil {
			_ = n.Close()
		}
	}()
	br := n.prefix + "br"
	for _, c := range [][]string{
		{"netns", "add", br},
		{"-n", br, "link", "set", "lo", "up"},
		// No spanning tree and no forward delay: ports forward at once.
		{"-n", br, "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0"},
		{"-n", br, "link", "set", "br0", "up"},
	} {
		if _, err := run(ctx, "", "ip", c...); err != nil {
			return nil, err
		}
	}
	for i, node := range n.nodes {
		ns, port := n.NS(node), "v-"+node
		n.ip[node] = fmt.Sprintf("10.201.%d.%d", n.subnet, i+1)
		for _, c := range [][]string{
			{"netns", "add", ns},
			{"-n", ns, "link", "set", "lo", "up"},
			// Both ends are created straight in their namespaces: nothing
			// appears, even briefly, among the host's interfaces.
			{"link", "add", Link, "netns", ns, "type", "veth", "peer", "name", port, "netns", br},
			{"-n", br, "link", "set", port, "master", "br0", "up"},
			{"-n", ns, "addr", "add", n.ip[node] + "/24", "dev", Link},
			{"-n", ns, "link", "set", Link, "up"},
		} {
			if _, err := run(ctx, "", "ip", c...); err != nil {
				return nil, err
			}
		}
		if err := n.SetDrops(ctx, node, nil); err != nil {
			return nil, err
		}
	}
	n.netem = n.probeNetem(ctx)
	return n, nil
}

// probeNetem reports whether the kernel has the netem qdisc, by adding one
// to the first node's link and removing it.
func (n *Net) probeNetem(ctx context.Context) bool {
	node := n.nodes[0]
	if _, err := n.Exec(ctx, node, "tc", "qdisc", "add", "dev", Link, "root", "netem", "delay", "1ms"); err != nil {
		return false
	}
	_, _ = n.Exec(ctx, node, "tc", "qdisc", "del", "dev", Link, "root")
	return true
}

// Netem reports whether delay, jitter and reordering can be injected.
func (n *Net) Netem() bool { return n.netem }

// Nodes returns the nodes, in the order given to NewNet.
func (n *Net) Nodes() []string { return append([]string(nil), n.nodes...) }

// NS returns the name of node's namespace.
func (n *Net) NS(node string) string { return n.prefix + node }

// IP returns node's address; empty for a node the net does not have.
func (n *Net) IP(node string) string { return n.ip[node] }

// Prefix returns what every name this net created starts with.
func (n *Net) Prefix() string { return n.prefix }

// Subnet returns the net's /24, for logs.
func (n *Net) Subnet() string { return fmt.Sprintf("10.201.%d.0/24", n.subnet) }

// Exec runs a command to completion in node's namespace and returns its
// standard output.
func (n *Net) Exec(ctx context.Context, node string, args ...string) (string, error) {
	return n.ExecInput(ctx, node, "", args...)
}

// ExecInput is Exec with stdin.
func (n *Net) ExecInput(ctx context.Context, node, stdin string, args ...string) (string, error) {
	if _, ok := n.ip[node]; !ok {
		return "", fmt.Errorf("chaos: no node %q", node)
	}
	return run(ctx, stdin, "ip", append([]string{"netns", "exec", n.NS(node)}, args...)...)
}

// SetDrops replaces node's drop rules with drops: one atomic nft
// transaction, so no packet sees half of a change.
func (n *Net) SetDrops(ctx context.Context, node string, drops []Drop) error {
	if _, err := n.ExecInput(ctx, node, NftScript(drops), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("chaos: drop rules on %s: %w", node, err)
	}
	return nil
}

// SetShape replaces the shaping of node's link (delay, jitter, reordering,
// rate). The zero Shape removes it.
func (n *Net) SetShape(ctx context.Context, node string, s Shape) error {
	args, err := TCArgs(s, n.netem)
	if err != nil {
		return fmt.Errorf("chaos: shape %s: %w", node, err)
	}
	if args == nil {
		// Deleting a root qdisc that is not there fails; either way
		// there is none afterwards.
		_, _ = n.Exec(ctx, node, "tc", "qdisc", "del", "dev", Link, "root")
		return nil
	}
	if _, err := n.Exec(ctx, node, append([]string{"tc", "qdisc", "replace", "dev", Link, "root"}, args...)...); err != nil {
		return fmt.Errorf("chaos: shape %s: %w", node, err)
	}
	return nil
}

// Close removes every namespace of the net, and with them their links,
// the bridge and the nftables tables. Processes still inside keep their
// namespace alive but nameless; the Cluster ends its processes first. It
// is idempotent.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	return removeNamespaces(context.Background(), n.prefix, false)
}

// Sweep removes the namespaces of harness processes that are gone: names
// fchaos-<pid>-… whose pid no longer runs. It ends the processes still
// inside them first (that run started them). Namespaces of a live harness
// are left alone.
func Sweep(ctx context.Context) error {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("chaos: sweep: %w", err)
	}
	dead := map[string]bool{}
	for _, e := range ents {
		pid, ok := ownerPID(e.Name())
		if ok && !alive(pid) {
			dead[fmt.Sprintf("%s%d-", NamePrefix, pid)] = true
		}
	}
	var errs []error
	for prefix := range dead {
		errs = append(errs, removeNamespaces(ctx, prefix, true))
	}
	return errors.Join(errs...)
}

// ownerPID parses the pid out of fchaos-<pid>-<run>-<node>.
func ownerPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, NamePrefix)
	if !ok {
		return 0, false
	}
	f := strings.SplitN(rest, "-", 3)
	if len(f) != 3 {
		return 0, false
	}
	pid, err := strconv.Atoi(f[0])
	return pid, err == nil && pid > 0
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// removeNamespaces deletes every namespace whose name starts with prefix,
// after killing the processes inside when kill is set.
func removeNamespaces(ctx context.Context, prefix string, kill bool) error {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("chaos: list namespaces: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if kill {
			out, _ := run(ctx, "", "ip", "netns", "pids", e.Name())
			for _, f := range strings.Fields(out) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if _, err := run(ctx, "", "ip", "netns", "del", e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what this net's prefix still names: namespaces, and links
// or nftables tables on the host. Empty after Close; tests use it.
func Leftovers(ctx context.Context, prefix string) ([]string, error) {
	var left []string
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			left = append(left, "namespace "+e.Name())
		}
	}
	links, err := run(ctx, "", "ip", "-o", "link", "show")
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(links, "\n") {
		if hostVeth.MatchString(l) || strings.Contains(l, prefix) {
			left = append(left, "host link "+strings.TrimSpace(l))
		}
	}
	tables, err := run(ctx, "", "nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	if strings.Contains(tables, nftTable) {
		left = append(left, "host nft table "+nftTable)
	}
	return left, nil
}

// hostVeth matches a bridge-side veth name in `ip -o link` output: one on
// the host would mean a link was created outside the run's namespaces.
var hostVeth = regexp.MustCompile(`^\d+: v-[a-z0-9]+[@:]`)

// Listen opens a TCP listener inside node's namespace. The socket belongs
// to the namespace it was made in, so it serves there from any thread.
func (n *Net) Listen(node, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.inside(node, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// Dial opens a TCP connection from node's namespace.
func (n *Net) Dial(ctx context.Context, node, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.inside(node, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// inside runs f on a thread that has entered node's network namespace,
// then returns the thread to the namespace it came from. Only a thread
// that could not go back stays locked and exits with its goroutine: the
// runtime ends a locked thread whose goroutine exits, and a process the
// harness started from that thread (with Pdeathsig) would be killed with
// it (the one-way scenario dials its Remotes this way while every server
// runs: before, all three servers died a second into the run).
func (n *Net) inside(node string, f func() error) error {
	if _, ok := n.ip[node]; !ok {
		return fmt.Errorf("chaos: no node %q", node)
	}
	path := filepath.Join(netnsDir, n.NS(node))
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := syscall.Open("/proc/thread-self/ns/net", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("chaos: open this thread's namespace: %w", err)
			return
		}
		defer syscall.Close(home)
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("chaos: open %s: %w", path, err)
			return
		}
		defer syscall.Close(fd)
		if _, _, e := syscall.RawSyscall(sysSetns, uintptr(fd), syscall.CLONE_NEWNET, 0); e != 0 {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("chaos: setns %s: %w", path, e)
			return
		}
		err = f()
		if _, _, e := syscall.RawSyscall(sysSetns, uintptr(home), syscall.CLONE_NEWNET, 0); e == 0 {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
