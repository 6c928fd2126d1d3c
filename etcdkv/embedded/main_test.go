package embedded

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	RunMemberIfAsked() // TestStartAgainOnATakenPort runs this binary as a member
	goleak.VerifyTestMain(m)
}
