package embedded_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/embedded"
	"github.com/oncekv/oncekv/kv"
)

// A three-member cluster on loopback ports: a database on it keeps
// writing with one member stopped (two of three are a quorum), and the
// member, restarted, catches up until every member holds the same data.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "embedded-example-")
	defer os.RemoveAll(dir)
	cluster, err := embedded.Start(embedded.Options{Members: 3, Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	b, err := etcdkv.Open(cluster.Endpoints(), nil)
	if err != nil {
		log.Fatal(err)
	}
	db, err := kv.New(b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	put := func(k string) error {
		return db.Update(ctx, func(tx kv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return bk.Put([]byte(k), []byte("paid"))
		})
	}

	fmt.Println("members:", len(cluster.Members), "put:", put("ord_1"))
	var follower *embedded.Member
	for _, m := range cluster.Members {
		if m != cluster.Leader(ctx) {
			follower = m
			break
		}
	}
	cluster.StopMember(follower)
	fmt.Println("one member stopped, put:", put("ord_2"))
	fmt.Println("restarted:", cluster.RestartMember(follower))
	fmt.Println("members identical:", cluster.Identical(ctx))
	// Output:
	// members: 3 put: <nil>
	// one member stopped, put: <nil>
	// restarted: <nil>
	// members identical: <nil>
}
