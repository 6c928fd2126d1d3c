package inbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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

	applied := 0
	for range 2 { // the delivery and its redelivery
		d, err := in.Handle(context.Background(), "billing", "m-1", func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("balances"))
			if err != nil {
				return err
			}
			applied++ // counts runs; only the committed one is kept
			return b.Put([]byte("acct-7"), []byte("100"))
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("ack=%v duplicate=%v\n", d.Ack, d.Duplicate)
	}
	fmt.Println("applied", applied, "time")
	// Output:
	// ack=true duplicate=false
	// ack=true duplicate=true
	// applied 1 time
}
