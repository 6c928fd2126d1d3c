package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/outbox"
)

// TestMain doubles as a consumer process for the crash test: with NATS_URL
// set it consumes into CONSUMER_DB and, after committing DIE_AFTER
// messages, kills itself with SIGKILL before acknowledging.
func TestMain(m *testing.M) {
	if url := os.Getenv("NATS_URL"); url != "" {
		os.Exit(consumerChild(url, os.Getenv("CONSUMER_DB"), os.Getenv("DIE_AFTER")))
	}
	goleak.VerifyTestMain(m)
}

func consumerChild(url, path, dieAfter string) int {
	ctx := context.Background()
	db, err := kv.Open(path, nil)
	if err != nil {
		return 2
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return 3
	}
	js, _ := jetstream.New(nc)
	cons, err := js.Consumer(ctx, streamName, consumerName)
	if err != nil {
		return 4
	}
	c, _ := newConsumer(db)
	n, _ := strconv.Atoi(dieAfter)
	c.afterCommit = func(applied int64) {
		if applied == int64(n) {
			// Committed, never acknowledged.
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				_ = p.Kill() // SIGKILL; TerminateProcess on Windows
			}
			select {}
		}
	}
	_ = c.drain(ctx, cons, 1<<30)
	return 5
}

func TestWholeFlow(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-orders", "60", "-drop-ack", "0.3", "-dir", t.TempDir()}, &out))
	require.Contains(t, out.String(), "applied       60 orders")
	require.Contains(t, out.String(), "applied twice 0")
}

// The consumer process is killed after committing a message and before
// acknowledging it. JetStream redelivers it to the restarted consumer; the
// inbox recognises it; the consumer's database holds every order once.
func TestConsumerKilledBeforeAck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	ns, err := startNATS(filepath.Join(dir, "js"))
	require.NoError(t, err)
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := setupStream(ctx, js, 300*time.Millisecond)
	require.NoError(t, err)

	// Produce ten orders and publish them through the relay.
	pdb, err := kv.Open(filepath.Join(dir, "producer.db"), nil)
	require.NoError(t, err)
	defer pdb.Close()
	ob := outbox.New(pdb)
	require.NoError(t, produce(ctx, ob, 10))
	pub := &natsPublisher{js: js}
	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: pub})
	require.NoError(t, err)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, st.Published)
	// A relay that republishes (a lost broker ack) is deduped by the broker.
	_, err = pub.Publish(ctx, []outbox.Event{{ID: "order.created/ord_0000", Topic: "created", Payload: []byte(`{"id":"ord_0000","amount_cents":100}`)}})
	require.NoError(t, err)
	require.EqualValues(t, 1, pub.deduped.Load())

	cpath := filepath.Join(dir, "consumer.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NATS_URL="+ns.ClientURL(), "CONSUMER_DB="+cpath, "DIE_AFTER=3")
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "the consumer died before its ack")

	cdb, err := kv.Open(cpath, nil)
	require.NoError(t, err)
	defer cdb.Close()
	counts, err := billed(cdb)
	require.NoError(t, err)
	require.Len(t, counts, 3, "three messages were committed before the kill")

	c, err := newConsumer(cdb)
	require.NoError(t, err)
	require.NoError(t, c.drain(ctx, cons, 10))
	require.GreaterOrEqual(t, c.stats.Redelivered, int64(1))
	require.GreaterOrEqual(t, c.stats.Duplicates, int64(1), "the redelivered message was recognised, not applied")
	counts, err = billed(cdb)
	require.NoError(t, err)
	require.Len(t, counts, 10)
	for id, n := range counts {
		require.Equal(t, 1, n, "order %s applied %d times", id, n)
	}
	problems, err := cdb.Check(ctx, inbox.RecordKind, outbox.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}
