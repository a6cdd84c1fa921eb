// Package tcptest runs a test's ranks as real processes over the TCP transport: the test
// binary starts itself N times with megago's launcher, each copy runs one worker test that
// joins the job and writes its result, and the starting test reads the results back.
// It is separate from internal/testutil because it imports package parallel, whose own
// tests use testutil.
package tcptest
