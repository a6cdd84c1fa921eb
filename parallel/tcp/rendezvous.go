package tcp

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"
)

// rendezvous connects this rank to every other (see Rendezvous in doc.go).
func (t *endpoint) rendezvous(ctx context.Context) error {
	if t.rank == 0 {
		return t.rendezvousRoot(ctx)
	}
	return t.rendezvousPeer(ctx)
}

func (t *endpoint) rendezvousRoot(ctx context.Context) error {
	host := ""
	if isLoopback(t.cfg.MasterAddr) {
		host = t.cfg.MasterAddr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", joinHostPort(host, t.cfg.MasterPort))
	if err != nil {
		return err
	}
	joined, err := t.acceptPeers(ctx, ln, 1)
	if err != nil {
		return err
	}
	addrs := make([]string, t.world)
	for r := 1; r < t.world; r++ {
		j := joined[r]
		ip := j.nc.RemoteAddr().(*net.TCPAddr).IP
		addrs[r] = joinHostPort(ip.String(), j.port)
		t.conns[r] = newPeerConn(t, r, j.nc)
	}
	table := encodeTable(addrs)
	for r := 1; r < t.world; r++ {
		if err := writeRaw(ctx, t.conns[r].nc, kindTable, 0, table); err != nil {
			return fmt.Errorf("sending the address table to rank %d: %w", r, err)
		}
	}
	return nil
}

func (t *endpoint) rendezvousPeer(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	master := t.masterHostPort()
	var ln net.Listener
	defer func() {
		if ln != nil {
			ln.Close() // acceptPeers has closed it already, unless it did not run
		}
	}()
	// Listen for higher ranks on the interface that reaches rank 0.
	listen := func(nc net.Conn) (int, error) {
		if ln == nil {
			var lc net.ListenConfig
			l, err := lc.Listen(ctx, "tcp", joinHostPort(nc.LocalAddr().(*net.TCPAddr).IP.String(), 0))
			if err != nil {
				return 0, err
			}
			ln = l
		}
		return ln.Addr().(*net.TCPAddr).Port, nil
	}
	nc, err := t.join(ctx, master, 0, listen)
	if err != nil {
		return fmt.Errorf("rank 0 at %s: %w", master, err)
	}
	t.conns[0] = newPeerConn(t, 0, nc)
	p, err := readRaw(ctx, nc, kindTable, time.Time{})
	if err != nil {
		return fmt.Errorf("waiting for the address table from rank 0: %w", err)
	}
	addrs, err := decodeTable(p, t.world)
	if err != nil {
		return fmt.Errorf("address table from rank 0: %w", err)
	}

	type accepted struct {
		joined map[int]joinedPeer
		err    error
	}
	acc := make(chan accepted, 1)
	go func() {
		j, err := t.acceptPeers(ctx, ln, t.rank+1)
		acc <- accepted{j, err}
	}()
	err = t.dialLower(ctx, addrs)
	if err != nil {
		cancel()
	}
	a := <-acc
	if err == nil {
		err = a.err
	}
	for r, j := range a.joined {
		if err != nil {
			j.nc.Close()
		} else {
			t.conns[r] = newPeerConn(t, r, j.nc)
		}
	}
	return err
}

// dialLower connects to every rank in [1, t.rank).
func (t *endpoint) dialLower(ctx context.Context, addrs []string) error {
	noPort := func(net.Conn) (int, error) { return 0, nil }
	for r := 1; r < t.rank; r++ {
		nc, err := t.join(ctx, addrs[r], r, noPort)
		if err != nil {
			return fmt.Errorf("rank %d at %s: %w", r, addrs[r], err)
		}
		t.conns[r] = newPeerConn(t, r, nc)
	}
	return nil
}

func joinHostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// isLoopback reports whether host names this machine's loopback interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
