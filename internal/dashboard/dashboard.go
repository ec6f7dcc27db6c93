// Package dashboard serves a node's admin API (docs/admin-api.md) and the
// live dashboard page that reads it.
//
// A Dashboard samples the node's counters once a second and keeps ten
// minutes of rates and latencies, and keeps the last membership events it
// saw; everything else is read from the node when asked. The page is a
// static file set embedded in the binary: it polls the API and needs
// nothing but the node it is served by.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fero-go/fero/internal/doc"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/ring"
)

// API is the admin API's version: every answer carries it, and its paths
// start /api/v1/. Fields are only ever added within a version.
const API = 1

// Sampling: once a second, ten minutes kept; the last 200 events kept.
const (
	sampleEvery = time.Second
	samplesKept = 600
	eventsKept  = 200
	// queryTimeout bounds the engine queries of one API answer.
	queryTimeout = 5 * time.Second
)

//go:embed static
var static embed.FS

// Node is what the dashboard reads of the node it serves (a
// *node.Node): it only reads.
type Node interface {
	Map() *ring.Map
	Membership() *membership.Membership
	Readiness(ctx context.Context) (protocol.Readiness, error)
	ReportFor(ctx context.Context, req protocol.StatusRequest) (*protocol.StatusReport, error)
	Stats() protocol.Stats
	Status(ctx context.Context) ([]partition.Status, error)
	Store() *doc.Store
	Traffic() (protocol.Traffic, bool)
}

// Dashboard serves one node's admin API and dashboard.
type Dashboard struct {
	n       Node
	version string
	started time.Time
	stop    chan struct{}
	// closeOnce closes stop, once however many Close calls race.
	closeOnce sync.Once
	done      sync.WaitGroup
	mux       *http.ServeMux

	mu      sync.Mutex
	samples []Sample // oldest first, at most samplesKept
	events  []Event  // oldest first, at most eventsKept
}

// New starts sampling n and recording its membership events; Close stops
// it. version is what the overview reports as the node's version.
func New(n Node, version string) *Dashboard {
	d := &Dashboard{n: n, version: version, started: time.Now(), stop: make(chan struct{})}
	d.mux = http.NewServeMux()
	d.mux.HandleFunc("GET /api/v1/overview", d.serveOverview)
	d.mux.HandleFunc("GET /api/v1/partitions", d.servePartitions)
	d.mux.HandleFunc("GET /api/v1/series", d.serveSeries)
	d.mux.HandleFunc("GET /api/v1/events", d.serveEvents)
	d.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such admin API path: "+r.URL.Path+" (docs/admin-api.md)")
	})
	d.mux.Handle("/", Static())
	sub := n.Membership().Subscribe()
	d.done.Add(2)
	go d.record(sub)
	go d.sample()
	return d
}

// Close stops the sampling and the event recording.
func (d *Dashboard) Close() {
	d.closeOnce.Do(func() { close(d.stop) })
	d.done.Wait()
}

// ServeHTTP serves /api/v1/... and the page at /dashboard/; after Close,
// the API answers 503.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-d.stop:
		if strings.HasPrefix(r.URL.Path, "/api/") {
			writeError(w, http.StatusServiceUnavailable, "the node is closed")
			return
		}
	default:
	}
	d.mux.ServeHTTP(w, r)
}

// Static serves the dashboard page at /dashboard/ and redirects / to it.
func Static() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	mux := http.NewServeMux()
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard/", http.FileServerFS(files)))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/dashboard/", http.StatusFound)
	})
	return mux
}

// Pending serves what get returns once it returns non-nil: until then the
// page, and 503 for the API (the node has not opened yet).
func Pending(get func() http.Handler) http.Handler {
	page := Static()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := get(); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/api/") {
			writeError(w, http.StatusServiceUnavailable, "the node has not opened yet (loading its data directory, or joining)")
			return
		}
		page.ServeHTTP(w, r)
	})
}

// Overview is /api/v1/overview's answer.
type Overview struct {
	API           int                      `json:"api"`
	Time          time.Time                `json:"time"`
	Node          NodeInfo                 `json:"node"`
	Members       []protocol.MemberReport  `json:"members"`
	Configuration []protocol.ConfigEntry   `json:"configuration"`
	Disk          *protocol.DiskReport     `json:"disk"`
	CatchUp       *partition.CatchUp       `json:"catch_up,omitempty"`
	Syncing       []protocol.SyncingReport `json:"syncing,omitempty"`
}

// NodeInfo is the node itself in an Overview.
type NodeInfo struct {
	ID         string         `json:"id"`
	Resource   string         `json:"resource"`
	Client     bool           `json:"client"`
	Addr       string         `json:"addr"`
	Version    string         `json:"version"`
	Started    time.Time      `json:"started"`
	Voting     bool           `json:"voting"`
	Cluster    string         `json:"cluster"`
	MapVersion string         `json:"map_version"` // a hash: a string, past JavaScript's exact integers
	Partitions int            `json:"partitions"`
	Keys       int            `json:"keys"`
	Roles      map[string]int `json:"roles"`
	Stats      protocol.Stats `json:"stats"`
	Ready      bool           `json:"ready"`
	NotReady   []string       `json:"not_ready"`
}

func (d *Dashboard) serveOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	// The overview shows no digest: computing it each poll would cost a
	// node with a gigabyte under writes seconds of CPU a second.
	rep, err := d.n.ReportFor(ctx, protocol.StatusRequest{NoDigest: true})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	rd, err := d.n.Readiness(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	o := Overview{
		API: API, Time: time.Now().UTC(),
		Node: NodeInfo{
			ID: rep.ID, Resource: rep.Resource, Client: rep.Client, Addr: rep.Addr,
			Version: d.version, Started: d.started.UTC(), Voting: rep.Voting, Cluster: rep.Cluster,
			MapVersion: protocol.FormatMapVersion(rep.MapVersion), Partitions: rep.Partitions, Keys: rep.Keys, Roles: rep.Roles,
			Stats: rep.Stats, Ready: rd.Ready, NotReady: rd.Why,
		},
		Members: rep.Members, Configuration: rep.Configuration, Disk: rep.Disk,
		CatchUp: rep.CatchUp, Syncing: rep.Syncing,
	}
	if o.Node.NotReady == nil {
		o.Node.NotReady = []string{}
	}
	// The report lists live members; the dashboard shows the dead and
	// those being admitted too.
	for _, mem := range d.n.Membership().Known() {
		if slices.ContainsFunc(o.Members, func(r protocol.MemberReport) bool { return r.ID == mem.ID }) {
			continue
		}
		o.Members = append(o.Members, protocol.MemberReport{
			ID: mem.ID, Addr: mem.Addr, Gossip: mem.Gossip,
			Client: mem.Role == membership.RoleClient, Status: mem.Status.String(),
		})
	}
	slices.SortFunc(o.Members, func(a, b protocol.MemberReport) int { return strings.Compare(a.ID, b.ID) })
	if o.Members == nil {
		o.Members = []protocol.MemberReport{}
	}
	if o.Configuration == nil {
		o.Configuration = []protocol.ConfigEntry{}
	}
	writeJSON(w, o)
}

// Partition is one partition in /api/v1/partitions.
type Partition struct {
	P          int      `json:"p"`
	Owner      string   `json:"owner"`
	Replicas   []string `json:"replicas"`
	Role       string   `json:"role"`
	Epoch      string   `json:"epoch"`
	Offset     uint64   `json:"offset"`
	Oldest     uint64   `json:"oldest"`
	Keys       int      `json:"keys"`
	LagOffsets uint64   `json:"lag_offsets"`
	LagSeconds float64  `json:"lag_seconds"`
	Why        string   `json:"why"`
}

// Partitions is /api/v1/partitions's answer.
type Partitions struct {
	API        int         `json:"api"`
	MapVersion string      `json:"map_version"`
	Partitions []Partition `json:"partitions"`
}

func (d *Dashboard) servePartitions(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	st, err := d.n.Status(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	out := Partitions{API: API, Partitions: make([]Partition, 0, len(st))}
	m := d.n.Map()
	if m != nil {
		out.MapVersion = protocol.FormatMapVersion(m.Version())
	}
	store := d.n.Store()
	for _, s := range st {
		p := Partition{
			P: s.Partition, Replicas: []string{}, Role: s.Role.String(),
			Epoch:  epochString(s.Position.Epoch),
			Offset: s.Position.Offset, Oldest: s.Oldest, Keys: store.PartitionLen(s.Partition),
			LagOffsets: s.Lag, LagSeconds: s.LagSeconds, Why: s.Why,
		}
		if m != nil && s.Partition < m.Partitions() {
			if o, ok := m.Owner(s.Partition); ok {
				p.Owner = o.ID
			}
			for _, r := range m.Replicas(s.Partition) {
				p.Replicas = append(p.Replicas, r.ID)
			}
		}
		out.Partitions = append(out.Partitions, p)
	}
	slices.SortFunc(out.Partitions, func(a, b Partition) int { return a.P - b.P })
	writeJSON(w, out)
}

// epochString is an epoch as term.owner ("0." before any).
func epochString(e partition.Epoch) string {
	return strconv.FormatUint(e.Term, 10) + "." + e.Owner
}

// Sample is one second of rates and latencies in /api/v1/series. A nil
// field had nothing to measure: no metrics, or no write (call) in the
// interval for a latency.
type Sample struct {
	T       int64    `json:"t"` // Unix milliseconds
	Commits float64  `json:"commits"`
	Applied float64  `json:"applied"`
	Writes  *float64 `json:"writes"`
	Calls   *float64 `json:"calls"`
	// Errors is the failed writes and calls per second, and ErrorCodes
	// the same by the error's code (absent when none failed). Writes,
	// Calls and the latencies count the successful ones only.
	Errors     *float64           `json:"errors"`
	ErrorCodes map[string]float64 `json:"error_codes,omitempty"`
	WriteP50ms *float64           `json:"write_p50_ms"`
	WriteP99ms *float64           `json:"write_p99_ms"`
	CallP50ms  *float64           `json:"call_p50_ms"`
	CallP99ms  *float64           `json:"call_p99_ms"`
}

// Series is /api/v1/series's answer.
type Series struct {
	API       int      `json:"api"`
	IntervalS float64  `json:"interval_s"`
	Samples   []Sample `json:"samples"`
}

func (d *Dashboard) serveSeries(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	out := Series{API: API, IntervalS: sampleEvery.Seconds(), Samples: slices.Clone(d.samples)}
	d.mu.Unlock()
	if out.Samples == nil {
		out.Samples = []Sample{}
	}
	writeJSON(w, out)
}

// Event is one membership event in /api/v1/events.
type Event struct {
	T      time.Time `json:"t"`
	Member string    `json:"member"`
	Addr   string    `json:"addr"`
	Client bool      `json:"client"`
	Status string    `json:"status"`
}

// Events is /api/v1/events's answer.
type Events struct {
	API    int     `json:"api"`
	Events []Event `json:"events"`
}

func (d *Dashboard) serveEvents(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	out := Events{API: API, Events: slices.Clone(d.events)}
	d.mu.Unlock()
	if out.Events == nil {
		out.Events = []Event{}
	}
	writeJSON(w, out)
}

// record keeps the membership events sub delivers.
func (d *Dashboard) record(sub *membership.Subscription) {
	defer d.done.Done()
	defer sub.Close()
	for {
		select {
		case <-d.stop:
			return
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			e := Event{
				T: ev.At.UTC(), Member: ev.Member.ID, Addr: ev.Member.Addr,
				Client: ev.Member.Role == membership.RoleClient, Status: ev.Member.Status.String(),
			}
			d.mu.Lock()
			d.events = appendKept(d.events, e, eventsKept)
			d.mu.Unlock()
		}
	}
}

// reading is what one tick reads from the node.
type reading struct {
	at         time.Time
	stats      protocol.Stats
	traffic    protocol.Traffic
	hasTraffic bool
}

// sample reads the node once a second and keeps the rates since the last
// reading.
func (d *Dashboard) sample() {
	defer d.done.Done()
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	last := d.read()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		cur := d.read()
		s := between(last, cur)
		last = cur
		d.mu.Lock()
		d.samples = appendKept(d.samples, s, samplesKept)
		d.mu.Unlock()
	}
}

func (d *Dashboard) read() reading {
	r := reading{at: time.Now(), stats: d.n.Stats()}
	r.traffic, r.hasTraffic = d.n.Traffic()
	return r
}

// between is the sample for the interval from a to b.
func between(a, b reading) Sample {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		secs = sampleEvery.Seconds()
	}
	rate := func(x, y uint64) float64 {
		if y < x {
			return 0
		}
		return float64(y-x) / secs
	}
	s := Sample{
		T:       b.at.UnixMilli(),
		Commits: rate(a.stats.Committed, b.stats.Committed),
		Applied: rate(a.stats.Applied, b.stats.Applied),
	}
	if !a.hasTraffic || !b.hasTraffic {
		return s
	}
	ta, tb := a.traffic, b.traffic
	writes, calls := rate(ta.Writes, tb.Writes), rate(ta.Calls, tb.Calls)
	s.Writes, s.Calls = &writes, &calls
	failed := 0.0
	for code, n := range tb.Errors {
		if r := rate(ta.Errors[code], n); r > 0 {
			if s.ErrorCodes == nil {
				s.ErrorCodes = map[string]float64{}
			}
			s.ErrorCodes[code] = r
			failed += r
		}
	}
	s.Errors = &failed
	s.WriteP50ms = quantileMs(tb.Bounds, ta.WriteBuckets, tb.WriteBuckets, ta.WriteCount, tb.WriteCount, 0.50)
	s.WriteP99ms = quantileMs(tb.Bounds, ta.WriteBuckets, tb.WriteBuckets, ta.WriteCount, tb.WriteCount, 0.99)
	s.CallP50ms = quantileMs(tb.Bounds, ta.CallBuckets, tb.CallBuckets, ta.CallCount, tb.CallCount, 0.50)
	s.CallP99ms = quantileMs(tb.Bounds, ta.CallBuckets, tb.CallBuckets, ta.CallCount, tb.CallCount, 0.99)
	return s
}

// quantileMs estimates the q-quantile, in milliseconds, of the
// observations a histogram gained between two readings (cumulative bucket
// counts ba and bb over bounds, totals ca and cb), interpolating linearly
// within the bucket it falls in, as Prometheus' histogram_quantile does.
// Observations above the last bound count as the last bound. nil when
// there were none.
func quantileMs(bounds []float64, ba, bb []uint64, ca, cb uint64, q float64) *float64 {
	if cb <= ca || len(bounds) == 0 || len(ba) != len(bounds) || len(bb) != len(bounds) {
		return nil
	}
	total := float64(cb - ca)
	rank := q * total
	prevCount, prevBound := 0.0, 0.0
	v := bounds[len(bounds)-1]
	for i, bound := range bounds {
		c := float64(bb[i] - ba[i])
		if c >= rank {
			in := c - prevCount
			if in <= 0 {
				v = bound
			} else {
				v = prevBound + (bound-prevBound)*(rank-prevCount)/in
			}
			break
		}
		prevCount, prevBound = c, bound
	}
	ms := math.Round(v*1e3*1e3) / 1e3 // microsecond resolution
	return &ms
}

// appendKept appends x to s, dropping the oldest beyond kept.
func appendKept[T any](s []T, x T, kept int) []T {
	if len(s) >= kept {
		copy(s, s[len(s)-kept+1:])
		s = s[:kept-1]
	}
	return append(s, x)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		API   int    `json:"api"`
		Error string `json:"error"`
	}{API, msg})
}
