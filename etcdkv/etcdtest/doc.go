// Package etcdtest runs real etcd clusters for tests (package embedded,
// stopped when the test ends): members embedded in the test process on
// loopback ports, or members in processes of their own that a test can
// SIGKILL.
//
// Start is embedded.Start bound to a test: the members' data lives in the
// test's temporary directory unless Options.Dir says otherwise, and the
// cluster is closed by t.Cleanup, so a failing test leaves no member
// running. A test package that asks for process members calls
// RunMemberIfAsked first in its TestMain, as the test binary is re-executed
// as each member. The library's own suites run on such a cluster through
// kvtest's remote backend (kvtest.EnvRemote), unchanged from bbolt.
package etcdtest
