package outbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/outbox"
)

// The event is written in the same transaction as the change that causes
// it; the relay publishes it after the commit, in commit order. Adding the
// same event ID again (a retried transaction) adds nothing.
func Example() {
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	ob := outbox.New(db)

	for range 2 { // the business transaction and a retry of it
		var added bool
		err := db.Update(ctx, func(tx kv.Tx) error {
			orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			if err := orders.Put([]byte("ord_1"), []byte("paid")); err != nil {
				return err
			}
			_, added, err = ob.AddTx(tx, outbox.Event{ID: "order.paid/ord_1", Topic: "order.paid", Payload: []byte(`{"order":"ord_1"}`)})
			return err
		})
		if err != nil {
			panic(err)
		}
		// Said once the transaction has committed: a function may run
		// more than once (etcd retries it after a conflict).
		fmt.Println("event added:", added)
	}

	relay, _ := outbox.NewRelay(ob, &outbox.RelayConfig{
		Publisher: outbox.PublishFunc(func(_ context.Context, ev outbox.Event) error {
			fmt.Printf("published %s #%d: %s\n", ev.ID, ev.Seq, ev.Payload)
			return nil
		}),
	})
	st, err := relay.RunOnce(ctx) // a service runs relay.Run(ctx, nil) instead
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Published, "published")
	// Output:
	// event added: true
	// event added: false
	// published order.paid/ord_1 #1: {"order":"ord_1"}
	// 1 published
}
