package kvtest_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// When Serve returns, no transaction of the server is running: one a
// client began and left waiting (its process gone, or its database
// closed under it) is ended then, not remoteIdle later, so a test that
// checks for leaks after Serve sees none.
func TestServeEndsTransactionsLeftOpen(t *testing.T) {
	defer goleak.VerifyNone(t)
	db, err := kv.Open(filepath.Join(t.TempDir(), "s.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- kvtest.Serve(ln, func(string) (kv.Backend, error) { return db, nil }) }()

	client, err := kvtest.RemoteBackend(ln.Addr().String(), "s")
	require.NoError(t, err)
	inTx, release := make(chan struct{}), make(chan struct{})
	viewed := make(chan error, 1)
	go func() {
		viewed <- client.View(context.Background(), func(tx kv.Tx) error {
			_ = tx.Bucket([]byte("any")) // the server's transaction is open
			close(inTx)
			<-release
			return nil
		})
	}()
	testwait.Receive(t, inTx, "the client's transaction open on the server")
	require.Equal(t, 1, db.Bolt().Stats().OpenTxN)

	require.NoError(t, ln.Close())
	testwait.Receive(t, served, "Serve's end")
	require.Zero(t, db.Bolt().Stats().OpenTxN, "Serve returned with a transaction still open")
	close(release)
	require.Error(t, testwait.Receive(t, viewed, "the client's transaction's end"), "the client's transaction ended with the server")
	require.NoError(t, client.Close())
}
