package sideeffect

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

var keysNS = keyspace.New("client.keys")

// KeyStore gives a client one idempotency key per logical operation ("pay
// order 1042"), created once and persisted before the first attempt, so a
// client that restarts mid-retry resumes with the same key and the server
// recognises the retry.
type KeyStore struct {
	db *kv.DB
}

// NewKeyStore returns a KeyStore in db.
func NewKeyStore(db *kv.DB) *KeyStore { return &KeyStore{db: db} }

// Key returns the idempotency key of operation, creating (a random UUID)
// and committing it on first use. Call it before the first attempt.
func (s *KeyStore) Key(ctx context.Context, operation string) (string, error) {
	if operation == "" || len(operation) > 1024 {
		return "", fmt.Errorf("sideeffect: operation name of %d bytes (want 1 to 1024)", len(operation))
	}
	// Most calls after the first are reads.
	var key string
	err := s.db.View(ctx, func(tx kv.Tx) error {
		var err error
		key, _, err = getKey(tx, operation)
		return err
	})
	if err != nil || key != "" {
		return key, err
	}
	err = s.db.Update(ctx, func(tx kv.Tx) error {
		var err error
		if key, _, err = getKey(tx, operation); err != nil || key != "" {
			return err
		}
		key = uuid.NewString()
		b, err := keysNS.Create(tx)
		if err != nil {
			return err
		}
		var e record.Encoder
		e.Reset(record.KindKeyStore, 1)
		e.String(key)
		e.Time(s.db.Clock().Now())
		return b.Put([]byte(operation), e.Finish())
	})
	return key, err
}

// Forget removes operation's key once the operation has definitely
// finished, so that the same operation name can start afresh.
func (s *KeyStore) Forget(ctx context.Context, operation string) error {
	return s.db.Update(ctx, func(tx kv.Tx) error {
		if b := keysNS.Bucket(tx); b != nil {
			return b.Delete([]byte(operation))
		}
		return nil
	})
}

func getKey(tx kv.Tx, operation string) (string, time.Time, error) {
	b := keysNS.Bucket(tx)
	if b == nil {
		return "", time.Time{}, nil
	}
	v := b.Get([]byte(operation))
	if v == nil {
		return "", time.Time{}, nil
	}
	d, _, err := record.NewDecoder(record.KindKeyStore, v)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sideeffect: key of %q: %w", operation, err)
	}
	key, created := d.String(), d.Time()
	return key, created, d.Done()
}
