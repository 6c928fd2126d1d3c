package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/outbox"
)

const (
	streamName   = "ORDERS"
	consumerName = "billing"
)

// startNATS runs a NATS server with JetStream inside this process, on a
// loopback port, storing streams under dir.
func startNATS(dir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, err
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("nats server did not start")
	}
	return ns, nil
}

// setupStream creates the stream (with a deduplication window: broker-side
// dedupe on Nats-Msg-Id, a second line of defence) and the durable consumer.
func setupStream(ctx context.Context, js jetstream.JetStream, ackWait time.Duration) (jetstream.Consumer, error) {
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: streamName, Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	}); err != nil {
		return nil, err
	}
	return js.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{
		Durable: consumerName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
	})
}

// natsPublisher is the relay's Publisher: each event goes to JetStream with
// Nats-Msg-Id = event ID, and counts as acknowledged when the stream
// acknowledged it.
type natsPublisher struct {
	js        jetstream.JetStream
	published atomic.Int64 // stored by the stream
	deduped   atomic.Int64 // refused by the stream as a duplicate
}

func (p *natsPublisher) Publish(ctx context.Context, events []outbox.Event) (int, error) {
	for i, ev := range events {
		msg := &nats.Msg{Subject: "orders." + ev.Topic, Data: ev.Payload, Header: nats.Header{}}
		for k, v := range ev.Headers {
			msg.Header.Set(k, v)
		}
		ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.ID))
		if err != nil {
			return i, err
		}
		if ack.Duplicate {
			p.deduped.Add(1)
		} else {
			p.published.Add(1)
		}
	}
	return len(events), nil
}

// produce writes n orders, each with its order.created event in the same
// transaction.
func produce(ctx context.Context, o *outbox.Outbox, n int) error {
	for i := range n {
		id := fmt.Sprintf("ord_%04d", i)
		payload, _ := json.Marshal(map[string]any{"id": id, "amount_cents": 100 + i})
		err := o.DB().Batch(ctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			if err := b.Put([]byte(id), payload); err != nil {
				return err
			}
			_, _, err = o.AddTx(tx, outbox.Event{ID: "order.created/" + id, Topic: "created", Key: id, Payload: payload})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// consumerStats counts what the consumer saw.
type consumerStats struct {
	Delivered, Redelivered, Applied, Duplicates, DroppedAcks int64
}

// consumer applies messages to its own database through the inbox, and
// acknowledges only after the commit.
type consumer struct {
	db    *kv.DB
	inbox *inbox.Inbox
	stats consumerStats
	// dropAck, if set, decides to "crash" before acknowledging: the broker
	// redelivers after AckWait.
	dropAck func() bool
	// afterCommit, if set, runs after each commit and before the ack (the
	// crash test kills the process here).
	afterCommit func(applied int64)
}

func newConsumer(db *kv.DB) (*consumer, error) {
	in, err := inbox.New(db, nil)
	if err != nil {
		return nil, err
	}
	return &consumer{db: db, inbox: in}, nil
}

// applyOrder is the consumer's state change: count the order once, and
// keep a running total.
func applyOrder(tx kv.Tx, data []byte) error {
	var o struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount_cents"`
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return err
	}
	b, err := tx.CreateBucketIfNotExists([]byte("billed"))
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(b.Get([]byte(o.ID))))
	if err := b.Put([]byte(o.ID), []byte(strconv.Itoa(n+1))); err != nil {
		return err
	}
	t, _ := strconv.ParseInt(string(b.Get([]byte("_total"))), 10, 64)
	return b.Put([]byte("_total"), []byte(strconv.FormatInt(t+o.Amount, 10)))
}

func (c *consumer) handle(ctx context.Context, m jetstream.Msg) error {
	c.stats.Delivered++
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
		c.stats.Redelivered++
	}
	id := m.Headers().Get(jetstream.MsgIDHeader)
	d, err := c.inbox.Handle(ctx, consumerName, id, func(tx kv.Tx) error { return applyOrder(tx, m.Data()) })
	if err != nil {
		return err // not acknowledged: redelivered after AckWait
	}
	if d.Duplicate {
		c.stats.Duplicates++
	} else {
		c.stats.Applied++
	}
	if c.afterCommit != nil {
		c.afterCommit(c.stats.Applied)
	}
	if c.dropAck != nil && c.dropAck() {
		c.stats.DroppedAcks++
		return nil
	}
	return m.Ack()
}

// drain fetches and handles messages until want orders are applied or ctx ends.
func (c *consumer) drain(ctx context.Context, cons jetstream.Consumer, want int) error {
	for ctx.Err() == nil {
		if n, err := billedCount(c.db); err != nil || n >= want {
			return err
		}
		batch, err := cons.Fetch(32, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			if err := c.handle(ctx, m); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return ctx.Err()
}

// billed returns how many times each order was applied.
func billed(db *kv.DB) (map[string]int, error) {
	out := map[string]int{}
	err := db.View(context.Background(), func(tx kv.Tx) error {
		b := tx.Bucket([]byte("billed"))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if k[0] == '_' {
				continue
			}
			n, _ := strconv.Atoi(string(v))
			out[string(k)] = n
		}
		return nil
	})
	return out, err
}

func billedCount(db *kv.DB) (int, error) {
	m, err := billed(db)
	return len(m), err
}

func randomDrop(rate float64, seed uint64) func() bool {
	r := rand.New(rand.NewPCG(seed, seed+1)) //nolint:gosec // fault dice, seeded for reproducible runs
	return func() bool { return r.Float64() < rate }
}
