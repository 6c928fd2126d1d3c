package etcdkv_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
)

// A transaction function (or an OnCommit handler) that panics leaves the
// backend whole: the panic reaches the caller, and transactions that then
// lose races and run alone (SoloAfter) still run. The shared hold a
// panicking attempt kept before made the first of those wait for ever,
// and every transaction after it.
func TestPanicLeavesTheBackendUsable(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: "/panic/", SoloAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	errBoom := errors.New("boom")
	for name, fn := range map[string]func(kv.Tx) error{
		"function": func(kv.Tx) error { panic(errBoom) },
		"OnCommit": func(tx kv.Tx) error { tx.OnCommit(func() { panic(errBoom) }); return nil },
	} {
		func() {
			defer func() {
				if r := recover(); r != errBoom {
					t.Fatalf("%s: recovered %v, want the panic", name, r)
				}
			}()
			_ = b.Update(ctx, func(tx kv.Tx) error {
				if _, err := tx.CreateBucketIfNotExists([]byte("b")); err != nil {
					return err
				}
				return fn(tx)
			})
		}()
	}

	// Contended increments: with SoloAfter 1, any that loses a race runs
	// its next attempt alone.
	const workers, n = 6, 10
	done := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range n {
				runs := 0
				if err := b.Update(ctx, increment(&runs, nil)); err != nil {
					done <- err
					return
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Minute):
		t.Fatal("transactions hang after a panic")
	}
	close(done)
	for err := range done {
		t.Fatal(err)
	}
	if got := counter(t, b); got != workers*n {
		t.Fatalf("counter %d, want %d", got, workers*n)
	}
}
