package inbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
)

// A broker delivers message m-1 twice (the consumer's first acknowledgement
// was lost). The state change and the processed-message ID commit together,
// so the redelivery is acknowledged without being applied again.
func ExampleInbox_Handle() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	in, _ := inbox.New(db, nil)

	for range 2 { // the delivery and its redelivery: a deposit of 100
		d, err := in.Handle(context.Background(), "billing", "m-1", func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("balances"))
			if err != nil {
				return err
			}
			balance, _ := strconv.Atoi(string(b.Get([]byte("acct-7"))))
			return b.Put([]byte("acct-7"), []byte(strconv.Itoa(balance+100)))
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("ack=%v duplicate=%v\n", d.Ack, d.Duplicate)
	}
	var balance string
	_ = db.View(context.Background(), func(tx kv.Tx) error {
		balance = string(tx.Bucket([]byte("balances")).Get([]byte("acct-7")))
		return nil
	})
	fmt.Println("balance", balance)
	// Output:
	// ack=true duplicate=false
	// ack=true duplicate=true
	// balance 100
}

// A consumer with a pool of workers: each handles one delivery after
// another, and the broker delivers every message twice. A pool that calls
// again as soon as it is answered commits in one batch per round with
// kv.Options.GatherCallers (without it, the workers split into groups
// that take turns, each paying a commit).
func ExampleInbox_Handle_workers() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), &kv.Options{GatherCallers: true})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	in, _ := inbox.New(db, nil)

	deliveries := make(chan string)
	go func() {
		for i := range 20 {
			id := fmt.Sprintf("m-%d", i)
			deliveries <- id
			deliveries <- id // redelivered
		}
		close(deliveries)
	}()
	var mu sync.Mutex
	applied, duplicates := 0, 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for id := range deliveries {
				d, err := in.Handle(context.Background(), "billing", id, func(tx kv.Tx) error {
					b, err := tx.CreateBucketIfNotExists([]byte("applied"))
					if err != nil {
						return err
					}
					return b.Put([]byte(id), nil)
				})
				if err != nil {
					panic(err)
				}
				mu.Lock()
				if d.Duplicate {
					duplicates++
				} else {
					applied++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Println("applied", applied, "duplicates", duplicates)
	// Output: applied 20 duplicates 20
}
