package storage_test

import (
	"fmt"
	"log"
	"os"

	"github.com/fero-go/fero/internal/storage"
)

// A driver's round: append each partition's new entries, sync once for
// the whole round (the node's default policy, SyncEachGroup), and now and
// then snapshot a partition to drop its log.
func Example() {
	dir, err := os.MkdirTemp("", "fero-storage-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := storage.OpenSegmentLog(dir, storage.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ep := storage.Epoch{Term: 1, Owner: "10.0.0.1:7946"}
	for o := uint64(1); o <= 3; o++ {
		e := storage.Entry{Epoch: ep, Offset: o, Type: 2, Key: "user-1", Value: []byte{byte(o)}}
		if err := s.Append(7, []storage.Entry{e}); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.SetMeta("accepted/7", []byte("term 1")); err != nil {
		log.Fatal(err)
	}
	// Acknowledge the round's writes once this returns.
	if err := s.Sync(); err != nil {
		log.Fatal(err)
	}
	if err := s.SaveSnapshot(7, storage.Snapshot{Base: 2, Epoch: ep, State: []byte("user-1=2")}); err != nil {
		log.Fatal(err)
	}
	_ = s.Close()

	s, err = storage.OpenSegmentLog(dir, storage.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	first, last, _ := s.Bounds(7)
	snap, _, _ := s.Snapshot(7)
	meta, _, _ := s.Meta("accepted/7")
	fmt.Printf("log %d…%d, snapshot at %d: %s, accepted: %s\n", first, last, snap.Base, snap.State, meta)
	// Output: log 3…3, snapshot at 2: user-1=2, accepted: term 1
}
