// Package testutil holds helpers shared by megago's tests.
//
// ForEachBackend runs a test body once per registered tensor backend, as a subtest named
// after the backend. The package imports internal/fakedev for its registration, so every
// such test runs on at least "cpu" and "fake" (a backend whose storage is reachable only
// through the Backend interface's copy calls): CI exercises the interface with two
// backends even where no GPU backend is available.
//
// Request sends a JSON HTTP request and returns the status and body, for the tests of
// megago serve's routes.
package testutil
