package command

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
)

func TestInbox(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out, _, code := run("inbox", "--db", db)
	require.Equal(t, 0, code)
	require.Contains(t, out, "(2 message IDs)")
	out, _, _ = run("inbox", "--db", db, "--consumer", "billing", "--json")
	var list []inspect.InboxEntry
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 1)
	require.Equal(t, "msg-1", list[0].MessageID)
	require.Equal(t, "billing", list[0].Consumer)
}
