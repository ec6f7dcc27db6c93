// Package membership owns cluster membership for one resource: who is in the
// cluster, how each member is reached, and what state each is in. It wraps
// hashicorp/memberlist (SWIM gossip and failure detection) and adds what
// fero needs around it:
//
//   - node metadata ([Meta]: stable ID, data-plane address, role, resource,
//     metadata version, boot incarnation) carried as msgpack in memberlist's
//     node meta, validated against memberlist's 512-byte limit;
//   - discovery: seed addresses, a port range scanned on given hosts, UDP
//     multicast announcements, and DNS (A or SRV records), mirroring the
//     original library's hosts, ports and udp constants;
//   - re-joining: a background loop keeps trying seeds, discovered addresses
//     and peers that died, with jittered exponential backoff, so that two
//     sides of a split that outlasted failure detection merge again once the
//     network heals (memberlist alone forgets dead peers and never does);
//   - peer status events ([Event]) delivered to subscribers without ever
//     blocking gossip: each subscriber keeps only the latest event per peer
//     (see [Subscription]).
//
// A [Membership] is built with [New] from options validated once, started
// with [Membership.Start], and stopped with [Membership.Close], which leaves
// the cluster gracefully, stops every goroutine it started and waits for
// them. It never logs on its own: memberlist's log lines are routed to the
// *slog.Logger given with [WithLogger].
//
// Tests run many members in one process over [memnet], an in-memory network
// that can partition, heal and drop packets, seeded so a run replays.
package membership
