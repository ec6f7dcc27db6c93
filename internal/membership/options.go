package membership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// Preset picks memberlist's timing profile.
type Preset uint8

const (
	// PresetLAN is memberlist's DefaultLANConfig, probing faster: every
	// 250ms with a 250ms timeout, gossip every 100ms, suspicion multiplier
	// 4 (a dead member is declared in about 1.5 s), TCP timeout 10s. The
	// default.
	PresetLAN Preset = iota + 1
	// PresetLocal is memberlist's DefaultLocalConfig: shorter timeouts for
	// loopback and tests (TCP timeout 1s, probe timeout 200ms, suspicion
	// multiplier 3), but with LAN's retransmit multiplier (4, not 2).
	PresetLocal
)

// Defaults, mirroring the original library's constants where it had one.
const (
	// DefaultResource is the original's default resource name.
	DefaultResource = "*"
	// DefaultMulticastGroup is the original's udp { ip, port }.
	DefaultMulticastGroup = "224.0.0.251:5354"
	// DefaultMulticastTTL is the original's udp.ttl. 224.0.0.0/24 is
	// link-local, so routers do not forward it whatever the TTL.
	DefaultMulticastTTL = 128
	// DefaultMulticastJitter is the original's udp.jitter: the most a node
	// waits before its first announcement, so a fleet started at once does
	// not announce in lockstep.
	DefaultMulticastJitter = 2 * time.Second
	// DefaultMulticastInterval is how often a node that is still alone
	// announces again (the original's udp.retry, always on here).
	DefaultMulticastInterval = 5 * time.Second
	// DefaultRejoinBase and DefaultRejoinCap are the original's
	// retries.base and retries.cap: the background re-join loop starts at
	// base after a peer dies and doubles to cap while nothing new is found.
	DefaultRejoinBase = 100 * time.Millisecond
	DefaultRejoinCap  = 60 * time.Second
	// DefaultRejoinJitter is the original's retries.jitter: each wait is
	// multiplied by a random factor in [1-jitter, 1].
	DefaultRejoinJitter = 0.5
	// DefaultForgetAfter is how long a dead peer is still re-tried before it
	// is forgotten (and a StatusRemoved event is sent).
	DefaultForgetAfter = time.Hour
	// DefaultLeaveTimeout bounds how long Close waits for the leave message
	// to go out.
	DefaultLeaveTimeout = 2 * time.Second
	// DefaultDNSPort is the gossip port assumed for DNS A records.
	DefaultDNSPort = 7946
	// MaxPortRange bounds a scanned port range.
	MaxPortRange = 1024
	// maxKnownPeers bounds the table of peers re-tried after they die.
	maxKnownPeers = 4096
)

// Resolver is the part of *net.Resolver the DNS discovery uses; tests inject
// their own.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// MulticastConfig configures discovery by UDP multicast.
type MulticastConfig struct {
	// Group is the multicast group host:port ([DefaultMulticastGroup]).
	Group string
	// TTL is the multicast TTL ([DefaultMulticastTTL]).
	TTL int
	// Jitter is the most a node waits before its first announcement
	// ([DefaultMulticastJitter]).
	Jitter time.Duration
	// Interval is how often a node that has no peers announces again
	// ([DefaultMulticastInterval]).
	Interval time.Duration
}

// Option configures a [Membership]. Options are sealed: only this package
// makes them.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithID sets the member's stable identity (default: "fero-" and 16 random
// hex digits, new on each start). Give a stable one, such as a Kubernetes pod
// name, so a restarted member gets its partitions back.
func WithID(id string) Option { return optionFunc(func(c *config) { c.meta.ID = id }) }

// WithResource sets the resource name (default [DefaultResource]). It is also
// memberlist's label, so clusters of different resources sharing hosts,
// ports or a multicast group ignore each other's packets.
func WithResource(name string) Option { return optionFunc(func(c *config) { c.meta.Resource = name }) }

// WithRole sets the role (default [RoleServer]).
func WithRole(r Role) Option { return optionFunc(func(c *config) { c.meta.Role = r }) }

// WithDataAddr sets the data-plane address published to peers (default
// empty; see [Membership.SetDataAddr] to set it after Start).
func WithDataAddr(addr string) Option { return optionFunc(func(c *config) { c.meta.Addr = addr }) }

// WithPreset picks memberlist's timing profile (default [PresetLAN]).
func WithPreset(p Preset) Option { return optionFunc(func(c *config) { c.preset = p }) }

// WithBind sets the gossip bind address host:port (default "0.0.0.0:0" with
// PresetLAN and "127.0.0.1:0" with PresetLocal; port 0 picks a free port).
func WithBind(hostport string) Option { return optionFunc(func(c *config) { c.bind = hostport }) }

// WithSeeds adds host:port addresses to join (the original's hosts, with
// ports). They are re-tried in the background for as long as the member runs.
func WithSeeds(addrs ...string) Option {
	return optionFunc(func(c *config) { c.seeds = append(c.seeds, addrs...) })
}

// WithPortRange makes the member bind the first free port in [start, end]
// and scan that range on the scan hosts for peers (the original's ports).
// At most [MaxPortRange] ports.
func WithPortRange(start, end int) Option {
	return optionFunc(func(c *config) { c.portStart, c.portEnd = start, end })
}

// WithScanHosts sets the hosts whose port range is scanned (default
// "127.0.0.1"). Only used with [WithPortRange].
func WithScanHosts(hosts ...string) Option {
	return optionFunc(func(c *config) { c.scanHosts = append([]string(nil), hosts...) })
}

// WithMulticast turns on multicast discovery with the given settings; zero
// fields take their defaults.
//
// Default: on with PresetLAN, as in the original (udp.skip false), so copies
// started on one network find each other with no configuration; off with
// PresetLocal, and off in test binaries (testing.Testing) so that parallel
// tests never find each other or a developer's running nodes.
func WithMulticast(mc MulticastConfig) Option {
	return optionFunc(func(c *config) { c.multicast, c.multicastSet = &mc, true })
}

// WithoutMulticast turns multicast discovery off (the original's udp: false).
func WithoutMulticast() Option {
	return optionFunc(func(c *config) { c.multicast, c.multicastSet = nil, true })
}

// WithDNS discovers peers through DNS, as a Kubernetes headless service
// gives: a name starting with "_" is looked up as SRV records (each target
// and port); any other name as A/AAAA records, each joined at port (0 means
// [DefaultDNSPort]). Looked up again on every re-join round.
func WithDNS(name string, port int) Option {
	return optionFunc(func(c *config) { c.dnsName, c.dnsPort = name, port })
}

// WithResolver replaces net.DefaultResolver for DNS discovery.
func WithResolver(r Resolver) Option { return optionFunc(func(c *config) { c.resolver = r }) }

// WithSecretKey encrypts and authenticates gossip with AES-GCM (memberlist's
// keyring); the key is 16, 24 or 32 bytes. Peers without the same key cannot
// join. Default: no encryption.
func WithSecretKey(key []byte) Option { return WithSecretKeys(key) }

// WithSecretKeys is WithSecretKey with a keyring: the member encrypts with
// the first key and accepts gossip encrypted with any of them, so keys can
// rotate on a running cluster (see [Membership.SetSecretKeys]).
func WithSecretKeys(keys ...[]byte) Option {
	return optionFunc(func(c *config) {
		c.secretKeys = c.secretKeys[:0]
		for _, k := range keys {
			c.secretKeys = append(c.secretKeys, append([]byte(nil), k...))
		}
	})
}

// WithLogger routes this package's and memberlist's logs to l (default: a
// logger that discards everything). Records carry component=membership;
// naming the resource and the member is l's part (fero's node logger
// already carries resource= and node=, and a second copy repeated both on
// every line).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithTransport replaces memberlist's UDP/TCP transport, for example with a
// [memnet] transport in tests. Bind and port range options are then unused.
func WithTransport(t memberlist.NodeAwareTransport) Option {
	return optionFunc(func(c *config) { c.transport = t })
}

// WithRejoin sets the re-join loop's backoff: base after a change, doubling
// to cap; jitter in [0, 1]. Defaults [DefaultRejoinBase], [DefaultRejoinCap],
// [DefaultRejoinJitter].
func WithRejoin(base, cap time.Duration, jitter float64) Option {
	return optionFunc(func(c *config) { c.rejoinBase, c.rejoinCap, c.rejoinJitter = base, cap, jitter })
}

// WithForgetAfter sets how long a dead peer keeps being re-tried (default
// [DefaultForgetAfter]).
func WithForgetAfter(d time.Duration) Option {
	return optionFunc(func(c *config) { c.forgetAfter = d })
}

// WithLeaveTimeout bounds the graceful leave in Close (default
// [DefaultLeaveTimeout]).
func WithLeaveTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.leaveTimeout = d })
}

// WithTuning edits memberlist's configuration after the preset is applied,
// for timings the presets do not cover. Fields this package owns (name,
// delegates, transport, keyring, label, logger) are set afterwards and win.
func WithTuning(f func(*memberlist.Config)) Option { return optionFunc(func(c *config) { c.tune = f }) }

type config struct {
	meta         Meta
	preset       Preset
	bind         string
	seeds        []string
	portStart    int
	portEnd      int
	scanHosts    []string
	multicast    *MulticastConfig
	multicastSet bool
	dnsName      string
	dnsPort      int
	resolver     Resolver
	secretKeys   [][]byte
	logger       *slog.Logger
	transport    memberlist.NodeAwareTransport
	rejoinBase   time.Duration
	rejoinCap    time.Duration
	rejoinJitter float64
	forgetAfter  time.Duration
	leaveTimeout time.Duration
	tune         func(*memberlist.Config)
	feed         Feed // an attached client's: no gossip (feed.go)
	// multicastConns replaces the multicast sockets (tests).
	multicastConns func(MulticastConfig) (recv, send packetConn, group net.Addr, err error)
}

func newConfig(opts []Option) (config, error) {
	c := config{
		meta:         Meta{Resource: DefaultResource, Role: RoleServer},
		preset:       PresetLAN,
		rejoinBase:   DefaultRejoinBase,
		rejoinCap:    DefaultRejoinCap,
		rejoinJitter: DefaultRejoinJitter,
		forgetAfter:  DefaultForgetAfter,
		leaveTimeout: DefaultLeaveTimeout,
		dnsPort:      DefaultDNSPort,
		resolver:     net.DefaultResolver,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.meta.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.meta.ID = "fero-" + hex.EncodeToString(b[:])
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.preset != PresetLAN && c.preset != PresetLocal {
		return c, fmt.Errorf("%w: preset %d", ErrInvalidOption, c.preset)
	}
	if c.bind == "" {
		c.bind = "0.0.0.0:0"
		if c.preset == PresetLocal {
			c.bind = "127.0.0.1:0"
		}
	}
	if _, _, err := splitBind(c.bind); err != nil {
		return c, err
	}
	if err := c.checkFeed(); err != nil {
		return c, err
	}
	if !c.multicastSet && c.preset == PresetLAN && !testing.Testing() && c.feed == nil {
		c.multicast = &MulticastConfig{}
	}
	if mc := c.multicast; mc != nil {
		if mc.Group == "" {
			mc.Group = DefaultMulticastGroup
		}
		if mc.TTL == 0 {
			mc.TTL = DefaultMulticastTTL
		}
		if mc.Jitter == 0 {
			mc.Jitter = DefaultMulticastJitter
		}
		if mc.Interval == 0 {
			mc.Interval = DefaultMulticastInterval
		}
		ap, err := netip.ParseAddrPort(mc.Group)
		switch {
		case err != nil:
			return c, fmt.Errorf("%w: multicast group %q: %w", ErrInvalidOption, mc.Group, err)
		case !ap.Addr().IsMulticast() && c.multicastConns == nil:
			return c, fmt.Errorf("%w: %q is not a multicast group", ErrInvalidOption, mc.Group)
		case mc.TTL < 1 || mc.TTL > 255:
			return c, fmt.Errorf("%w: multicast TTL %d not in [1, 255]", ErrInvalidOption, mc.TTL)
		case mc.Jitter < 0 || mc.Interval <= 0:
			return c, fmt.Errorf("%w: multicast jitter %v / interval %v", ErrInvalidOption, mc.Jitter, mc.Interval)
		}
	}
	if c.portStart != 0 || c.portEnd != 0 {
		if c.portStart < 1 || c.portEnd > 65535 || c.portEnd < c.portStart || c.portEnd-c.portStart >= MaxPortRange {
			return c, fmt.Errorf("%w: port range [%d, %d]", ErrInvalidOption, c.portStart, c.portEnd)
		}
		if len(c.scanHosts) == 0 {
			c.scanHosts = []string{"127.0.0.1"}
		}
	}
	for _, s := range c.seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return c, fmt.Errorf("%w: seed %q: %w", ErrInvalidOption, s, err)
		}
	}
	if c.dnsPort < 0 || c.dnsPort > 65535 {
		return c, fmt.Errorf("%w: DNS port %d", ErrInvalidOption, c.dnsPort)
	}
	if c.dnsPort == 0 {
		c.dnsPort = DefaultDNSPort
	}
	if c.resolver == nil {
		return c, fmt.Errorf("%w: nil resolver", ErrInvalidOption)
	}
	for _, k := range c.secretKeys {
		if err := checkKey(k); err != nil {
			return c, err
		}
	}
	if c.rejoinBase <= 0 || c.rejoinCap < c.rejoinBase || c.rejoinJitter < 0 || c.rejoinJitter > 1 {
		return c, fmt.Errorf("%w: rejoin base %v cap %v jitter %v", ErrInvalidOption, c.rejoinBase, c.rejoinCap, c.rejoinJitter)
	}
	if c.forgetAfter <= 0 || c.leaveTimeout <= 0 {
		return c, fmt.Errorf("%w: forget-after %v / leave timeout %v", ErrInvalidOption, c.forgetAfter, c.leaveTimeout)
	}
	if len(c.meta.Resource) > 255 {
		// memberlist labels are at most 255 bytes.
		return c, fmt.Errorf("%w: resource name longer than 255 bytes", ErrInvalidOption)
	}
	if _, err := EncodeMeta(c.meta); err != nil {
		return c, err
	}
	return c, nil
}

func splitBind(hostport string) (string, int, error) {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("%w: bind %q must be ip:port: %w", ErrInvalidOption, hostport, err)
	}
	return ap.Addr().String(), int(ap.Port()), nil
}

// checkKey checks a gossip key's size (AES-128, -192 or -256).
func checkKey(k []byte) error {
	if n := len(k); n != 16 && n != 24 && n != 32 {
		return fmt.Errorf("%w: secret key is %d bytes, want 16, 24 or 32", ErrInvalidOption, n)
	}
	return nil
}
