package retention

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Zero fields take the defaults; a negative Pause means none, not the
// default; set fields are kept.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []*Config{nil, {}} {
		require.Equal(t, Config{BatchSize: DefaultBatchSize, MaxTxTime: DefaultMaxTxTime, Pause: DefaultPause}, c.withDefaults())
	}
	require.Equal(t, Config{BatchSize: DefaultBatchSize, MaxTxTime: DefaultMaxTxTime},
		(&Config{BatchSize: -1, MaxTxTime: -1, Pause: -1}).withDefaults())
	set := Config{BatchSize: 7, MaxTxTime: time.Second, Pause: time.Minute, DryRun: true}
	require.Equal(t, set, set.withDefaults())
}
