package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/oncekv/oncekv/kv"
)

// Open a database, write in a managed transaction, read in another. Every
// oncekv package takes the same *kv.DB and works in the same transactions.
func Example() {
	dir, _ := os.MkdirTemp("", "kv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil) // 0600, lock timeout, format check
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()

	err = db.Update(ctx, func(tx kv.Tx) error {
		orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		return orders.Put([]byte("ord_1"), []byte(`{"amount":1200}`))
	})
	if err != nil {
		panic(err)
	}
	var order []byte
	_ = db.View(ctx, func(tx kv.Tx) error { // fn may run more than once: it keeps its last reading
		order = bytes.Clone(tx.Bucket([]byte("orders")).Get([]byte("ord_1"))) // valid only in tx: copied
		return nil
	})
	fmt.Printf("%s\n", order)
	fmt.Println("backend:", db.Traits().Name, "single writer:", db.Traits().SingleWriter)
	// Output:
	// {"amount":1200}
	// backend: bbolt single writer: true
}

// Scan one customer's orders, and only theirs: keys that share a prefix
// through a cursor bounded to it. On etcd the commit of a transaction
// that scanned then compares that range alone, so that other customers'
// new orders do not refuse it.
func ExampleRangeCursor() {
	dir, _ := os.MkdirTemp("", "kv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	var acme []string
	err = db.Update(ctx, func(tx kv.Tx) error {
		orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		for _, k := range []string{"acme/1", "acme/2", "acmex/1", "globex/1"} {
			if err := orders.Put([]byte(k), []byte("{}")); err != nil {
				return err
			}
		}
		acme = acme[:0] // the function may run more than once: its last run counts
		prefix := []byte("acme/")
		c := kv.RangeCursor(orders, prefix, kv.PrefixEnd(prefix))
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			acme = append(acme, string(k))
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	for _, k := range acme {
		fmt.Println(k)
	}
	// Output:
	// acme/1
	// acme/2
}

// Batch is group commit: concurrent callers share one transaction and one
// fsync. The function may run more than once, so it touches nothing outside
// its transaction.
func ExampleDB_Batch() {
	dir, _ := os.MkdirTemp("", "kv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()

	done := make(chan error)
	for i := range 10 {
		go func() {
			done <- db.Batch(ctx, func(tx kv.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("events"))
				if err != nil {
					return err
				}
				return b.Put(fmt.Appendf(nil, "e%02d", i), nil)
			})
		}()
	}
	for range 10 {
		if err := <-done; err != nil {
			panic(err)
		}
	}
	var n int
	_ = db.View(ctx, func(tx kv.Tx) error {
		n = 0 // from zero at every run
		c := tx.Bucket([]byte("events")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		return nil
	})
	fmt.Println(n, "events committed")
	// Output: 10 events committed
}

// BackupFile copies the database as of one read transaction, while writes
// go on, to a new file: whole, or not at all. The copy opens as the
// original does.
func ExampleDB_BackupFile() {
	dir, _ := os.MkdirTemp("", "kv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	err = db.Update(ctx, func(tx kv.Tx) error {
		orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		return orders.Put([]byte("ord_1"), []byte(`{"amount":1200}`))
	})
	if err != nil {
		panic(err)
	}

	copyPath := filepath.Join(dir, "app.backup.db")
	if _, err := db.BackupFile(ctx, copyPath); err != nil {
		panic(err)
	}
	_, err = db.BackupFile(ctx, copyPath)
	fmt.Println("again:", errors.Is(err, os.ErrExist)) // never replaces a file

	restored, err := kv.Open(copyPath, &kv.Options{ReadOnly: true})
	if err != nil {
		panic(err)
	}
	defer restored.Close()
	var order []byte
	_ = restored.View(ctx, func(tx kv.Tx) error {
		order = bytes.Clone(tx.Bucket([]byte("orders")).Get([]byte("ord_1")))
		return nil
	})
	fmt.Printf("%s\n", order)
	// Output:
	// again: true
	// {"amount":1200}
}

// A service's shutdown: stop taking requests, then close the database
// within what is left of the grace period. A transaction that never ends
// (a handler blocked inside it) would keep Close waiting for ever;
// CloseContext gives up and says so, and the process may exit: what was
// committed is in the file.
func ExampleDB_CloseContext() {
	dir, _ := os.MkdirTemp("", "kv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	// ... srv.Shutdown(ctx) first: in-flight requests finish.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.CloseContext(ctx); errors.Is(err, context.DeadlineExceeded) {
		fmt.Println("exiting with a transaction still running:", err)
		return
	} else if err != nil {
		panic(err)
	}
	fmt.Println("closed")
	// Output: closed
}

// A liveness check reports DB.Err: after a commit whose sync failed
// (ErrSyncFailed) the database refuses every call until it is reopened,
// and a failing check has the orchestrator restart the service.
func ExampleDB_Err() {
	dir, _ := os.MkdirTemp("", "kv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	live := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := db.Err(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	check := func() {
		w := httptest.NewRecorder()
		live.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/livez", nil))
		fmt.Print(w.Code, " ", w.Body)
	}
	check()
	_ = db.Close()
	check()
	// Output:
	// 200 ok
	// 503 kv: database is closed
}

// A service that exits by itself when its database begins refusing
// calls (after a commit whose sync failed: ErrSyncFailed), for its
// supervisor to restart it and the open to read what the disk holds.
// Here the refusal is a Close, made while the service runs.
func ExampleDB_Done() {
	dir, _ := os.MkdirTemp("", "kv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // SIGTERM's, in a service
	defer stop()
	go func() { _ = db.Close() }()
	select {
	case <-db.Done():
		fmt.Println("exiting:", db.Err())
	case <-ctx.Done():
		fmt.Println("shutting down")
	}
	// Output: exiting: kv: database is closed
}

// A recover of your own inside a transaction's function lets a fault on
// the database's file go on (a page the disk could not read): kv then
// refuses the database (ErrReadFailed) rather than serve on a disk that
// fails its reads. Any other panic is yours to handle.
func ExampleDB_IsFault() {
	dir, _ := os.MkdirTemp("", "kv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	var prices map[string]int // a bug: never made
	err = db.Update(context.Background(), func(tx kv.Tx) (err error) {
		defer func() {
			if p := recover(); p != nil {
				if db.IsFault(p) {
					panic(p) // the file's: kv's to handle
				}
				err = fmt.Errorf("pricing failed: %v", p)
			}
		}()
		prices["book"] = 12
		return nil
	})
	fmt.Println(err)
	fmt.Println("database:", db.Err())
	// Output:
	// pricing failed: assignment to entry in nil map
	// database: <nil>
}
