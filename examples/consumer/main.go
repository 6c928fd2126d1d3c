package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/outbox"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	orders := fs.Int("orders", 200, "orders to produce")
	dropAck := fs.Float64("drop-ack", 0.2, "probability that the consumer 'crashes' before acknowledging")
	dir := fs.String("dir", "", "directory for the databases and the stream (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "oncekv-consumer")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(d) }()
		*dir = d
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	ns, err := startNATS(filepath.Join(*dir, "jetstream"))
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := setupStream(ctx, js, 300*time.Millisecond)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "nats listening on %s (JetStream, stream %s, dedupe window 2m)\n", ns.ClientURL(), streamName)

	// Producer: orders + outbox, and the relay.
	pdb, err := kv.Open(filepath.Join(*dir, "producer.db"), nil)
	if err != nil {
		return err
	}
	defer func() { _ = pdb.Close() }()
	ob := outbox.New(pdb)
	pub := &natsPublisher{js: js}
	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: pub, PollInterval: time.Second})
	if err != nil {
		return err
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx, nil) }()
	if err := produce(ctx, ob, *orders); err != nil {
		stopRelay()
		return err
	}

	// Consumer: its own database, inbox + state change in one transaction.
	cdb, err := kv.Open(filepath.Join(*dir, "consumer.db"), nil)
	if err != nil {
		stopRelay()
		return err
	}
	defer func() { _ = cdb.Close() }()
	c, err := newConsumer(cdb)
	if err != nil {
		stopRelay()
		return err
	}
	c.dropAck = randomDrop(*dropAck, 1)
	derr := c.drain(ctx, cons, *orders)
	stopRelay()
	if err := <-relayDone; !errors.Is(err, context.Canceled) {
		return err
	}
	if derr != nil {
		return derr
	}

	counts, err := billed(cdb)
	if err != nil {
		return err
	}
	twice := 0
	for _, n := range counts {
		if n != 1 {
			twice++
		}
	}
	lag, _ := ob.Lag(ctx)
	fmt.Fprintf(out, "produced      %d orders, each with its event in the same transaction\n", *orders)
	fmt.Fprintf(out, "published     %d events to JetStream (%d refused by the broker as duplicates; %d still pending)\n",
		pub.published.Load(), pub.deduped.Load(), lag.Pending)
	fmt.Fprintf(out, "delivered     %d messages (%d redeliveries; %d acknowledgements dropped on purpose)\n",
		c.stats.Delivered, c.stats.Redelivered, c.stats.DroppedAcks)
	fmt.Fprintf(out, "applied       %d orders; %d redeliveries skipped by the inbox\n", c.stats.Applied, c.stats.Duplicates)
	fmt.Fprintf(out, "applied twice %d\n", twice)
	if len(counts) != *orders || twice != 0 {
		return fmt.Errorf("expected %d orders applied once each, got %d applied, %d more than once", *orders, len(counts), twice)
	}
	return nil
}
