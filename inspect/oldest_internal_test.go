package inspect

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/oncekv/oncekv/outbox"
)

// The outbox summary's oldest pending events are the oldest by creation
// whatever order they are read in: by key on etcd, where sequences are
// random, the first read are any.
func TestOldestKeepsTheOldestInOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var events []*outbox.Event
	for i := range 50 {
		events = append(events, &outbox.Event{Seq: rand.Uint64(), CreatedAt: t0.Add(time.Duration(i) * time.Second)}) //nolint:gosec // test order
	}
	rand.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] }) //nolint:gosec // test order
	var list []*outbox.Event
	for _, e := range events {
		list = oldest(list, e, 20)
	}
	if len(list) != 20 {
		t.Fatalf("%d kept, want 20", len(list))
	}
	for i, e := range list {
		if want := t0.Add(time.Duration(i) * time.Second); !e.CreatedAt.Equal(want) {
			t.Fatalf("oldest[%d] created %v, want %v", i, e.CreatedAt, want)
		}
	}
}
