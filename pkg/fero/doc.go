// Package fero is the public API of fero for Go: open a named resource,
// read it locally, write to it through its partitions' owners, answer
// requests with your own verbs, and react to its changes.
//
// # Resources
//
// A resource is a named key/value map served by every process that opens
// it. Each copy of the service joins one cluster by gossip; a consistent-hash
// ring gives each of the resource's partitions one owner; the owner commits
// each write to the partition's log and sends the commit to every other
// copy, server or client. Every node therefore holds the whole map, and
// reads never leave the process.
//
//	users, err := fero.Open(ctx, "users", fero.WithSeeds("10.0.0.1:7946"))
//	if err != nil { … }
//	defer users.Close()
//	err = users.Update(ctx, "ada", map[string]any{"name": "Ada"})   // waits for the owner's ack
//	name, ok := users.Get("ada.name")                                 // local read
//
// Keys are paths: segments separated by '.', array elements by index, "-"
// to append. The top-level segment picks the partition. [Map] is the typed
// form: top-level keys to values of one Go type, encoded with msgpack.
//
// A [Client] node owns no partition; it receives every commit and sends its
// writes straight to the owners. Given the cluster secret it gossips like a
// server; given [WithAttach] and a client token ([WithToken]) it attaches
// to the servers without the secret, and they take from it only its own
// writes, fetches and acks.
//
// # Writes and what they wait for
//
// Update, Add, Remove, Push, Patch and Set build change records (the
// original's helpers) and send each to the owner of its partition, at
// most two hops away. The last argument says what to wait for: [NoWait]
// (fire and forget; nothing is allocated to wait), [Ack] (the owner
// committed; the default), [Replicas](k) (k replicas applied it) or
// [Majority] (a majority of the cluster's servers applied it, which
// survives any owner change, crash, pause or split). Every call that waits
// takes a context, and every write has a deadline: the context's, or the
// write timeout (10s). A write takes effect before its caller is answered,
// or never: no node applies it after its deadline.
//
// [Resource.SetAsync] and [Resource.CallAsync] keep many writes or requests
// in flight from one goroutine and report each through a callback; a
// [Batch] sends a burst of requests in one write per connection when
// flushed.
//
// The owner checks each change against its state before it commits: Add of
// a key that exists, or a path through a scalar, fails with
// CodeFailedPrecondition and is never committed.
//
// # One key, one turn
//
// A verb's handler runs on the owner of its key, alone for that key:
// before it starts, every earlier write to the key is applied there, and
// until it returns no other request for the key runs, verb or built-in
// write, from any node; they wait in the key's queue, in arrival order.
// Other keys run in parallel. What the handler writes to its own
// partition, with the context it was given, is committed when it returns,
// as one record, all or nothing, in the ownership the handler began in:
// if the partition moved meanwhile, nothing is committed and the call is
// made again at the new owner. So the read-modify-write every service is
// made of needs no lock, and survives rolling restarts. Verbs that only
// read may opt out ([Concurrent]). [Handler] has the details.
//
// Outside a handler, a read-modify-write uses a key's [Version]:
// [Resource.GetVersion] reads it with the value, and [Resource.UpdateIf],
// [Resource.RemoveIf] and [Map.PutIf] write only if it has not moved,
// failing with CodeFailedPrecondition and the current version
// ([VersionOf]) if it has. The VERSION verb ([VerbVersion]) reads a key
// and its version through the owner.
//
// # Exactly once
//
// Every Update, Add, Remove, Push and Set that waits (and the typed map's),
// on a Resource or a [Remote], and every Call, carries its node's writer ID
// and a sequence number. When an attempt fails with an
// indefinite error (its owner died, closed or lost the partition with it
// in flight), fero sends it again, as the same write, to the key's owner
// by then, until the caller's deadline (the write timeout without one);
// the owner remembers what each writer's recent sequences did, in the
// partition's replicated state, and answers a retry of a committed write
// with its first outcome, and a retried Call with the verb's first reply,
// without running it again. A verb that wrote nothing, or failed, keeps no
// record and runs again. The memory covers a writer's last 64 sequences
// in each partition and the 1,024 most recent writers of a partition.
// [WithoutRetry] turns this off. Writes that wait for nothing, Patch, and
// the async forms ([Resource.SetAsync], [Resource.CallAsync]) carry no
// writer.
//
// # Requests and handlers
//
// [Resource.Call] sends a request (a verb, a key and a payload) to the
// owner of the key, where the resource's [Handler] answers it; the reply,
// or a coded [Error], comes back to the caller. A handler can fall through
// to the built-in handling of ADD, UPDATE, REMOVE and GET with
// [Request.Next]. [Resource.Send] is the fire-and-forget form. Unknown verbs
// are answered with CodeUnimplemented, a panicking handler with
// CodeInternal.
//
// [Resource.Stream] sends a request whose answer is a stream of items,
// which the owner's handler sends with [Request.Send], at the reader's
// pace; the stream ends with the handler, with the reader, or with
// [ErrStreamMoved] when the key's partition moves to another owner.
// Deadlines and headers ([WithHeader]) travel with calls and streams;
// interceptors ([WithInterceptors], [WithCallInterceptors],
// [WithStreamInterceptors]) wrap them; [WithCallRetry] and
// [WithCallTimeout] shape calls. Package ferotest runs a cluster inside
// a test.
//
// # Change streams
//
// [Resource.Changes] yields every change applied to this node's copy, as a
// Go iterator; [Resource.Commits] only those this node committed as owner;
// [Resource.Subscribe] is the channel form. [Prefix] limits a stream to the
// changes under a path ("carts.ada": that key and the paths under it), and
// the node filters where it applies changes, so a stream pays nothing for
// the changes it does not watch; [Map.Watch] is the typed form
// (docs/changes.md). A stream buffers [DefaultBuffer]
// changes; when its consumer falls that far behind it drops the newest and
// counts them ([DropNewest], the default) or makes the node wait
// ([Block]; nothing is lost, and a slow consumer slows the node).
// [Resource.MemberEvents] reports peers' status.
//
// # Connect
//
// [WithConnect] ties the resource to the service's own [Store]: the first
// server of a cluster restores its initial state from the store after the
// connect wait, and changes are replayed into the store (see [Replayer]).
//
// # Options: which kind each is
//
// Options are typed by what reads them, so that the compiler refuses one
// given where it would do nothing: fero.Dial(ctx, addr, fero.WithDataDir(dir))
// does not compile. A [NodeOption] configures a node that [Open] or
// [OpenMap] starts, a [DialOption] a [Remote] that [Dial] opens, and an
// [Option] is both: what a node and a Remote share.
//
// Option, for Open, OpenMap and Dial alike:
//
//	credentials         WithClusterSecret, WithToken (Open: only with WithAttach)
//	transport           WithTLS, WithDialer, WithConnectTimeout, WithMaxFrame,
//	                    WithMaxBatch, WithOutboxLimit, WithFrameTimeout
//	calls and streams   WithCallInterceptors, WithStreamInterceptors, WithCallRetry,
//	                    WithCallTimeout, WithoutRetry, WithTracerProvider
//	bundle              WithOptions
//
// DialOption, for Dial only:
//
//	WithRetry (its redial backoff), DialOptions (a bundle)
//
// NodeOption, for Open and OpenMap only (the kind of node that does
// nothing with one, or refuses it, in parentheses):
//
//	the node            Client, WithID, WithListen, WithLogger, WithDefaultWait,
//	                    WithMaxRequests, WithTick, WithMetrics, WithoutGCTuning,
//	                    Options (a bundle)
//	requests            WithHandler, Concurrent, WithInterceptors (a client node
//	                    owns no partition: nothing)
//	connect             WithConnect, WithConnectWait, WithReplayAll
//	gossip, discovery   WithPreset, WithBind, WithSeeds, WithRequireSeeds,
//	                    WithPortRange, WithScanHosts, WithMulticast, WithoutMulticast,
//	                    WithDNS, WithDNSServer, WithSecretKey, WithGossipTransport,
//	                    WithGossipTuning, WithLeaveTimeout,
//	                    WithExpect (a client node: Open fails)
//	credentials taken   WithClientTokens, WithAttach (a server: Open fails)
//	the ring            WithPartitions, WithVNodes, WithLoad, WithReplicas,
//	                    WithPartitioner
//	the engine          WithHistoryMax, WithHistoryBytes, WithQuorum, WithClockSkew,
//	                    WithWriteTimeout, WithSyncTimeout, WithSyncQueueMax,
//	                    WithTurnQueueMax, WithGapBufferMax, WithFetchMax,
//	                    WithProbeInterval, WithMaxEntry
//	connections taken   WithMaxConns, WithPreAuthLimits, WithNewConnRate,
//	                    WithAuthTimeout, WithMaxInflight
//	storage             WithDataDir (a client node: Open fails),
//	                    WithFsync (without WithDataDir: nothing)
//
// Every Option is a NodeOption and a DialOption, so one value serves
// both; a slice does not convert ([]Option is not []NodeOption), so code
// that builds options for both keeps the shared ones apart and appends
// them to each list.
//
// # Options and the original's constants
//
// Every option has a default; the original library's constants map to
// them as follows.
//
//	original constant        option                       default
//	dht.vnodes               WithVNodes                   200
//	connect.wait             WithConnectWait              1s
//	retries.base/cap/max     WithRetry (a Remote's redial; a DialOption) 100ms, 60s, 5; nodes redial peers as the engine needs them
//	retries.jitter           (always full jitter)         -
//	connections.timeout      WithConnectTimeout           10s
//	connections.jitter       (not needed: simultaneous dials resolve deterministically)
//	connections.max.*        (not applicable: one connection per pair of nodes)
//	udp / udp.skip           WithMulticast, WithoutMulticast  on with PresetLAN, off with PresetLocal
//	udp.ip/port/ttl/jitter   MulticastConfig fields       224.0.0.251:5354, TTL 128 (membership defaults)
//	udp.retry                MulticastConfig.Interval     announces again while alone
//	partitions.history.max   WithHistoryMax               10,000 (the original kept everything)
//	(none)                   WithHistoryBytes             2 MiB of keys and values per partition
//	outbox.max               WithMaxBatch                 256 KiB per write
//	outbox.frag              WithMaxFrame                 16 MiB
//	hosts                    WithSeeds, WithScanHosts     none
//	ports                    WithPortRange                none (a free port)
//	hash                     WithPartitioner              hash of the top-level key
//	client                   Client                       server
//
// And fero for Go's own: WithPartitions (271), WithReplicas (2), WithLoad
// (2.0), WithQuorum (a majority of the configuration), WithWriteTimeout
// (10s), WithMaxEntry (1 MiB), WithOutboxLimit (256 KiB), WithTLS,
// WithSecretKey, WithClusterSecret, WithClientTokens (none), WithPreset,
// WithBind, WithListen, WithLogger (none), WithDataDir (none: in memory),
// WithFsync (FsyncGroup) and WithRequireSeeds (off: a node whose seeds do
// not answer opens, warns and keeps trying).
//
// # Durability
//
// By default a server keeps everything in memory and comes back empty
// after a restart; the other servers hold the data (a Majority write is on
// a majority of them). [WithDataDir] keeps a server's partitions on its
// disk: with [FsyncGroup] (the default) every acknowledgement leaves the
// node only once what it promises is on disk, so a write acknowledged at
// [Majority] survives a crash of every server at once, and a restarted
// server loads its data and fetches only what it missed. [FsyncInterval]
// and [FsyncNever] trade that for speed; docs/storage.md has what each
// promises.
//
// # Errors
//
// Every error fero returns for a cluster condition is an [*Error] with a
// [Code] that crosses the wire; check it with [CodeOf] or errors.Is.
// [Definite] tells whether a failed write certainly did not happen.
// CodeUnavailable means "not now, and not applied" (no owner yet, an owner
// syncing after a membership change, a node on the minority side of a
// split, a deadline that passed before any node committed the write):
// retrying is safe. CodeDeadlineExceeded and CodeAborted mean the write
// may have taken effect (before the error was returned, never after).
//
// A GET request ([Resource.Call] with VerbGet) is a linearizable read: the
// owner confirms with a majority of the servers that it still owns the
// partition and that what it read is durable. [Resource.Get] reads this
// node's copy: fast, not linearizable.
//
// The design behind these guarantees is docs/engine.md.
package fero
