package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v4"
	"golang.org/x/net/ipv4"

	"github.com/tabcast/tabcast/turnd/relay"
)

// TURN relay: turnd (the plugin, pion/turn) beside Debian's coturn, in the
// same run, on loopback. Both servers run as their own process (turnd in a
// child copy of this program, so that neither shares a Go runtime with the
// load generator): 10 pion/turn client allocations send 1200-byte datagrams
// through their relays to one UDP sink at a paced total rate; the sink
// counts what arrives per allocation. Once pion's client has created the
// permission and bound the channel, the load goes as the same ChannelData
// frames written with sendmmsg on each client's socket, so that the load
// generator is not the bottleneck (TABCAST_BENCH_TURN_SENDER=pion sends
// through pion's relay conn instead). Then 200 sequential allocate+close
// cycles per server.

const (
	turnAllocs      = 10
	turnPayload     = 1200
	turnPhase       = 3 * time.Second
	turnSlice       = time.Millisecond
	turnMaxBacklog  = 50 * time.Millisecond // a sender further behind skips ahead (counted as not sent)
	turnSlots       = 6                     // each rate's turnPhase per server is split into alternating slots
	turnDrain       = 400 * time.Millisecond
	turnCycles      = 200
	turnCycleBlocks = 10 // the allocation cycles alternate turnd/coturn in blocks of turnCycles/turnCycleBlocks
	turnTimeout     = 110 * time.Second
	turnTargetRatio = 0.9
	turnTargetRate  = 20000
	turnSecret      = "tabcast-bench-turn-secret-0123456789abcdef"
	turnChildEnv    = "TABCAST_BENCH_TURND_CHILD"
	turnPerAllocCap = 1000000  // relayKbpsPerAllocation: the config's maximum
	turnTotalCap    = 10000000 // relayKbpsTotal: the config's maximum
)

var turnRates = []int{5000, 20000, 80000}

type turnSide struct {
	SentPerSec      float64   `json:"achievedSendPktPerSec"`
	Sent            int64     `json:"sent"`
	Skipped         int64     `json:"skippedBehindSchedule"`
	SendErrors      int64     `json:"sendErrors"`
	Received        int64     `json:"received"`
	DeliveredPerSec float64   `json:"deliveredPktPerSec"`
	Mbps            float64   `json:"deliveredPayloadMbitPerSec"`
	LossPercent     float64   `json:"lossPercent"`
	PerAllocLoss    []float64 `json:"perAllocationLossPercent"`
	ServerCPU       float64   `json:"serverCpuPercentOfOneCore"`
	CPUPerPkt       float64   `json:"serverCpuMicrosPerDeliveredPkt"`
}

type turnRateRow struct {
	TargetPerSec int      `json:"targetPktPerSec"`
	Order        string   `json:"order"`
	Turnd        turnSide `json:"turnd"`
	Coturn       turnSide `json:"coturn"`
	// Ratio is turnd delivered pkt/s over coturn delivered pkt/s.
	Ratio float64 `json:"ratioDelivered"`
}

type turnAllocRow struct {
	Cycles     int     `json:"cycles"`
	Failures   int     `json:"failures"`
	PerSec     float64 `json:"allocationsPerSec"`
	P50Ms      float64 `json:"cycleP50Ms"`
	P95Ms      float64 `json:"cycleP95Ms"`
	MaxMs      float64 `json:"cycleMaxMs"`
	ServerCPUs float64 `json:"serverCpuSeconds"`
	// Errors counts the failed cycles by error text.
	Errors map[string]int `json:"errors,omitempty"`
}

// turnCycleAcc accumulates one server's allocate+close cycles.
type turnCycleAcc struct {
	ok   []time.Duration
	wall time.Duration // every cycle, failed ones too
	errs map[string]int
	cpu  time.Duration
}

type turnReport struct {
	When        time.Time     `json:"when"`
	Machine     string        `json:"machine"`
	Method      string        `json:"method"`
	Sender      string        `json:"sender"`
	Turnd       string        `json:"turnd"`
	Coturn      string        `json:"coturn"`
	Rates       []turnRateRow `json:"rates"`
	AllocTurnd  turnAllocRow  `json:"allocTurnd"`
	AllocCoturn turnAllocRow  `json:"allocCoturn"`
	AllocRatio  float64       `json:"allocRatio"`
	Checks      []string      `json:"checks"`
	LoadBefore  string        `json:"loadAverageBefore"`
	LoadAfter   string        `json:"loadAverageAfter"`
	WallSeconds float64       `json:"wallSeconds"`
}

// turnOnly runs just the TURN part (bench -only turn).
func turnOnly() error {
	_, err := turnBench(context.Background())
	return err
}

// turnBench runs the TURN part, prints its table and writes
// bench/results/turn.json.
func turnBench(parent context.Context) (*turnReport, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, turnTimeout)
	defer cancel()
	rep := &turnReport{When: start.UTC(), LoadBefore: loadAverage(),
		Machine: machine(),
		Method: fmt.Sprintf("%d pion/turn v4 UDP clients on 127.0.0.1, one allocation each, send %d-byte datagrams through their relays "+
			"(ChannelData) to one UDP sink on 127.0.0.1, paced in %v slices (a sender more than %v behind skips ahead), %v per rate and server in %d alternating slots; "+
			"the sink counts by a tag in the payload per allocation after a %v drain. Loss = 1 - received/sent. Mbit/s counts payload bytes. "+
			"Allocation rate: %d sequential cycles of new client socket + Allocate (401 + authenticated) + Close, alternating servers in blocks. "+
			"Server CPU from /proc/<pid>/stat of the server process.",
			turnAllocs, turnPayload, turnSlice, turnMaxBacklog, turnPhase, turnSlots, turnDrain, turnCycles)}
	rep.Sender = "sendmmsg of ChannelData frames (channel 0x4000, bound by pion's client) on each pion client's own socket, batches up to 64"
	if turnPionSender {
		rep.Sender = "pion/turn relay conn WriteTo, one datagram a call"
	}
	err := turnMeasure(ctx, rep)
	rep.LoadAfter = loadAverage()
	rep.WallSeconds = r1(time.Since(start).Seconds())
	printTurn(rep)
	out := filepath.Join("bench", "results", "turn.json")
	b, _ := json.MarshalIndent(rep, "", "  ")
	if werr := os.WriteFile(out, append(b, '\n'), 0o644); werr != nil && err == nil {
		err = werr
	} else if werr == nil {
		fmt.Println("written:", out)
	}
	return rep, err
}

var quietPionLogs = func() logging.LoggerFactory {
	f := logging.NewDefaultLoggerFactory()
	f.DefaultLogLevel = logging.LogLevelDisabled
	return f
}()

type turnAlloc struct {
	conn   net.PacketConn
	client *turn.Client
	relay  net.PacketConn
	pc     *ipv4.PacketConn // conn, for sendmmsg
}

// turnChannel is the channel number pion's client binds first (its binding
// manager starts at 0x4000); each allocation here has one peer, the sink.
const turnChannel = 0x4000

// turnPionSender makes the load go through pion's relay conn WriteTo (one
// sendto per datagram plus pion's bookkeeping) instead of the same
// ChannelData frames written with sendmmsg on the client's socket.
var turnPionSender = os.Getenv("TABCAST_BENCH_TURN_SENDER") == "pion"

// channelBatch is a batch of ChannelData frames (channel turnChannel)
// carrying tagged payloads to server.
func (a *turnAlloc) channelBatch(server net.Addr, tag, idx byte) []ipv4.Message {
	msgs := make([]ipv4.Message, 64)
	for k := range msgs {
		f := make([]byte, 4+turnPayload) // 1200 is a multiple of 4: no padding
		binary.BigEndian.PutUint16(f[0:], turnChannel)
		binary.BigEndian.PutUint16(f[2:], turnPayload)
		f[4], f[5] = tag, idx
		msgs[k] = ipv4.Message{Buffers: [][]byte{f}, Addr: server}
	}
	return msgs
}

func (a *turnAlloc) close() {
	if a.relay != nil {
		a.relay.Close()
	}
	a.client.Close()
	a.conn.Close()
}

func turnAllocate(s *turnServerRun, rto time.Duration) (*turnAlloc, error) {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: s.addr.String(), TURNServerAddr: s.addr.String(), Conn: conn,
		Username: s.user, Password: s.pass, Realm: "tabcast", LoggerFactory: quietPionLogs, RTO: rto,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	a := &turnAlloc{conn: conn, client: c, pc: ipv4.NewPacketConn(conn.(*net.UDPConn))}
	if err := c.Listen(); err != nil {
		a.close()
		return nil, err
	}
	if a.relay, err = c.Allocate(); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// turnSink counts datagrams per (phase, allocation) from the payload tag.
type turnSink struct {
	conn   *net.UDPConn
	counts [256][turnAllocs]atomic.Int64
	bad    atomic.Int64
	done   chan struct{}
}

func newTurnSink() (*turnSink, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	_ = c.SetReadBuffer(4 << 20)
	s := &turnSink{conn: c, done: make(chan struct{})}
	go s.loop()
	return s, nil
}

func (s *turnSink) port() int { return s.conn.LocalAddr().(*net.UDPAddr).Port }

func (s *turnSink) loop() {
	defer close(s.done)
	pc := ipv4.NewPacketConn(s.conn)
	msgs := make([]ipv4.Message, 64)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 2048)}
	}
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			return
		}
		for _, m := range msgs[:n] {
			b := m.Buffers[0][:m.N]
			if len(b) != turnPayload || int(b[1]) >= turnAllocs {
				s.bad.Add(1)
				continue
			}
			s.counts[b[0]][b[1]].Add(1)
		}
	}
}

func (s *turnSink) close() {
	s.conn.Close()
	<-s.done
}

type turnTraffic struct {
	server   net.Addr
	sinkAddr net.Addr
	allocs   []*turnAlloc
}

// turnAcc accumulates one server's figures at one rate over its slots.
type turnAcc struct {
	sent, skipped, errs []int64
	wall                time.Duration
}

// slot sends at rate pkt/s in total for dur, tagging the datagrams with
// tag (1..251), and adds to acc.
func (t *turnTraffic) slot(tag byte, rate int, dur time.Duration, acc *turnAcc) {
	sinkAddr := t.sinkAddr
	per := float64(rate) / float64(len(t.allocs))
	if acc.sent == nil {
		acc.sent, acc.skipped, acc.errs = make([]int64, len(t.allocs)), make([]int64, len(t.allocs)), make([]int64, len(t.allocs))
	}
	var wg sync.WaitGroup
	start := time.Now().Add(2 * time.Millisecond)
	end := start.Add(dur)
	for i, a := range t.allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, turnPayload)
			buf[0], buf[1] = tag, byte(i)
			batch := a.channelBatch(t.server, tag, byte(i))
			maxBehind := int64(per * turnMaxBacklog.Seconds())
			// Stagger the allocations' slices.
			next := start.Add(time.Duration(i) * turnSlice / time.Duration(len(t.allocs)))
			var seq, skipped int64
			base := acc.sent[i] + acc.skipped[i] // sequence numbers continue over slots
			for {
				time.Sleep(time.Until(next))
				now := time.Now()
				if now.After(end) {
					now = end
				}
				due := int64(per * now.Sub(start).Seconds())
				if behind := due - seq - skipped; behind > maxBehind {
					skipped += behind - maxBehind
				}
				if turnPionSender {
					for seq+skipped < due {
						binary.BigEndian.PutUint64(buf[2:], uint64(base+seq))
						if _, err := a.relay.WriteTo(buf, sinkAddr); err != nil {
							acc.errs[i]++
						}
						seq++
					}
				} else {
					for seq+skipped < due {
						n := int(min(due-seq-skipped, int64(len(batch))))
						for k := range n {
							binary.BigEndian.PutUint64(batch[k].Buffers[0][4+2:], uint64(base+seq+int64(k)))
						}
						w, err := a.pc.WriteBatch(batch[:n], 0)
						if err != nil {
							acc.errs[i]++
							w = max(w, 1) // count it as sent (and lost): never spin
						}
						seq += int64(w)
					}
				}
				if !now.Before(end) {
					break
				}
				next = next.Add(turnSlice)
				if time.Until(next) < -turnSlice {
					next = time.Now() // fell behind by more than a slice: re-anchor
				}
			}
			acc.sent[i] += seq
			acc.skipped[i] += skipped
		}()
	}
	wg.Wait()
	acc.wall += time.Since(start)
}

// side turns acc and the sink's counts for tag into figures; cpu is the
// server's CPU time over the whole rate block (it is idle in the other
// server's slots).
func (acc *turnAcc) side(sink *turnSink, tag byte, cpu time.Duration) turnSide {
	var side turnSide
	for i := range acc.sent {
		got := sink.counts[tag][i].Load()
		side.Sent += acc.sent[i]
		side.Skipped += acc.skipped[i]
		side.SendErrors += acc.errs[i]
		side.Received += got
		l := 0.0
		if acc.sent[i] > 0 {
			l = 100 * (1 - float64(got)/float64(acc.sent[i]))
		}
		side.PerAllocLoss = append(side.PerAllocLoss, r2(l))
	}
	secs := acc.wall.Seconds()
	side.SentPerSec = r1(float64(side.Sent) / secs)
	side.DeliveredPerSec = r1(float64(side.Received) / secs)
	side.Mbps = r1(side.DeliveredPerSec * turnPayload * 8 / 1e6)
	if side.Sent > 0 {
		side.LossPercent = r2(100 * (1 - float64(side.Received)/float64(side.Sent)))
	}
	side.ServerCPU = r1(100 * cpu.Seconds() / secs)
	if side.Received > 0 {
		side.CPUPerPkt = r2(float64(cpu.Microseconds()) / float64(side.Received))
	}
	return side
}

func r2(v float64) float64 { return float64(int64(v*100+0.5*sign(v))) / 100 }

func sign(v float64) float64 {
	if v < 0 {
		return -1
	}
	return 1
}

// warm creates the permissions and channel bindings (tag wtag, not counted)
// and checks that every allocation reaches the sink.
func (t *turnTraffic) warm(sink *turnSink, wtag, ctag byte) error {
	sinkAddr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sink.port()}
	buf := make([]byte, turnPayload)
	deadline := time.Now().Add(5 * time.Second)
	for {
		for i, a := range t.allocs {
			buf[0], buf[1] = wtag, byte(i)
			if _, err := a.relay.WriteTo(buf, sinkAddr); err != nil {
				return fmt.Errorf("allocation %d: %w", i, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
		ok := true
		for i := range t.allocs {
			if sink.counts[wtag][i].Load() == 0 {
				ok = false
			}
		}
		if ok {
			// Let the channel binds (sent after the first Send indication)
			// finish, then check that raw ChannelData frames arrive.
			time.Sleep(300 * time.Millisecond)
			return t.checkChannel(sink, ctag)
		}
		if time.Now().After(deadline) {
			return errors.New("not every allocation reached the sink within 5 s")
		}
	}
}

// checkChannel sends ctag-tagged ChannelData frames on turnChannel from each
// allocation and waits until the sink has one from each.
func (t *turnTraffic) checkChannel(sink *turnSink, ctag byte) error {
	if turnPionSender {
		return nil
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		for i, a := range t.allocs {
			b := a.channelBatch(t.server, ctag, byte(i))
			if _, err := a.pc.WriteBatch(b[:1], 0); err != nil {
				return fmt.Errorf("allocation %d: channel data: %w", i, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
		ok := true
		for i := range t.allocs {
			if sink.counts[ctag][i].Load() == 0 {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ChannelData on channel %#x did not reach the sink from every allocation within 3 s", turnChannel)
		}
	}
}

func (t *turnTraffic) close() {
	for _, a := range t.allocs {
		a.close()
	}
}

func openTraffic(srv *turnServerRun, sink *turnSink, wtag, ctag byte) (*turnTraffic, error) {
	t := &turnTraffic{server: srv.addr, sinkAddr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sink.port()}}
	for range turnAllocs {
		a, err := turnAllocate(srv, 200*time.Millisecond)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("%s: allocate: %w", srv.name, err)
		}
		t.allocs = append(t.allocs, a)
	}
	if err := t.warm(sink, wtag, ctag); err != nil {
		t.close()
		return nil, fmt.Errorf("%s: %w", srv.name, err)
	}
	return t, nil
}

func turnMeasure(ctx context.Context, rep *turnReport) error {
	if _, err := os.Stat("/usr/bin/turnserver"); err != nil {
		return errors.New("coturn missing: apt-get install -y coturn")
	}
	dir, err := os.MkdirTemp("", "tabcast-bench-turn-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sink, err := newTurnSink()
	if err != nil {
		return err
	}
	defer sink.close()
	// Relay ranges below the ephemeral range (so the sink's port is never in
	// one), 1000 ports each.
	lo := 20000 + 1000*rand.IntN(10)
	td, err := startTurnd(lo, lo+999, sink.port(), dir)
	if err != nil {
		return err
	}
	defer td.stop()
	ct, args, err := startCoturn(lo+1000, lo+1999, dir)
	if err != nil {
		return err
	}
	defer ct.stop()
	rep.Turnd = fmt.Sprintf("turnd %s (pion/turn v4.1.4) in a child process; relayKbpsPerAllocation %d, relayKbpsTotal %d (the config maxima), socketBuffer 4 MiB, selfAddresses [127.0.0.1], selfPorts [sink]; GOMAXPROCS %d",
		relay.Version, turnPerAllocCap, turnTotalCap, runtime.GOMAXPROCS(0))
	rep.Coturn = coturnVersion() + ": /usr/bin/turnserver " + strings.ReplaceAll(strings.Join(args, " "), turnSecret, "S")

	tdT, err := openTraffic(td, sink, 252, 253)
	if err != nil {
		return err
	}
	defer tdT.close()
	ctT, err := openTraffic(ct, sink, 254, 255)
	if err != nil {
		return err
	}
	defer ctT.close()
	tag := byte(1)
	for _, r := range turnRates {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		row := turnRateRow{TargetPerSec: r, Order: fmt.Sprintf("%d alternating %v slots each, turnd first then coturn first in turn", turnSlots, turnPhase/turnSlots)}
		var tdAcc, ctAcc turnAcc
		tdCPU0, ctCPU0 := td.cpu(), ct.cpu()
		for k := range turnSlots {
			if k%2 == 0 {
				tdT.slot(tag, r, turnPhase/turnSlots, &tdAcc)
				ctT.slot(tag+1, r, turnPhase/turnSlots, &ctAcc)
			} else {
				ctT.slot(tag+1, r, turnPhase/turnSlots, &ctAcc)
				tdT.slot(tag, r, turnPhase/turnSlots, &tdAcc)
			}
		}
		time.Sleep(turnDrain)
		row.Turnd = tdAcc.side(sink, tag, td.cpu()-tdCPU0)
		row.Coturn = ctAcc.side(sink, tag+1, ct.cpu()-ctCPU0)
		tag += 2
		if row.Coturn.DeliveredPerSec > 0 {
			row.Ratio = r2(row.Turnd.DeliveredPerSec / row.Coturn.DeliveredPerSec)
		}
		rep.Rates = append(rep.Rates, row)
	}
	tdT.close()
	ctT.close()
	tdT.allocs, ctT.allocs = nil, nil
	time.Sleep(200 * time.Millisecond)

	var tdAcc, ctAcc turnCycleAcc
	block := turnCycles / turnCycleBlocks
	cycles := func(s *turnServerRun, acc *turnCycleAcc) {
		c0 := s.cpu()
		for range block {
			t0 := time.Now()
			a, err := turnAllocate(s, 200*time.Millisecond)
			if err == nil {
				a.close()
			}
			d := time.Since(t0)
			acc.wall += d
			if err != nil {
				if acc.errs == nil {
					acc.errs = map[string]int{}
				}
				acc.errs[err.Error()]++
				continue
			}
			acc.ok = append(acc.ok, d)
		}
		acc.cpu += s.cpu() - c0
	}
	for b := range turnCycleBlocks {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if b%2 == 0 {
			cycles(td, &tdAcc)
			cycles(ct, &ctAcc)
		} else {
			cycles(ct, &ctAcc)
			cycles(td, &tdAcc)
		}
	}
	rep.AllocTurnd = tdAcc.row()
	rep.AllocCoturn = ctAcc.row()
	if rep.AllocCoturn.PerSec > 0 {
		rep.AllocRatio = r2(rep.AllocTurnd.PerSec / rep.AllocCoturn.PerSec)
	}
	if n := sink.bad.Load(); n > 0 {
		rep.Checks = append(rep.Checks, fmt.Sprintf("sink received %d datagrams without a valid tag", n))
	}

	// The targets.
	for _, row := range rep.Rates {
		if row.TargetPerSec != turnTargetRate {
			continue
		}
		met := row.Ratio >= turnTargetRatio && row.Turnd.Received == row.Turnd.Sent
		rep.Checks = append(rep.Checks, fmt.Sprintf("throughput at %d pkt/s: turnd delivered %.0f pkt/s = %.2f× coturn's %.0f (target ≥ %.1f×), turnd lost %d of %d (target 0): %s",
			turnTargetRate, row.Turnd.DeliveredPerSec, row.Ratio, row.Coturn.DeliveredPerSec, turnTargetRatio, row.Turnd.Sent-row.Turnd.Received, row.Turnd.Sent, metWord(met)))
	}
	rep.Checks = append(rep.Checks, fmt.Sprintf("allocation rate: turnd %.0f/s vs coturn %.0f/s = %.2f× (target ≥ 1.0×): %s",
		rep.AllocTurnd.PerSec, rep.AllocCoturn.PerSec, rep.AllocRatio, metWord(rep.AllocRatio >= 1 && rep.AllocTurnd.Failures == 0)))
	return nil
}

func metWord(ok bool) string {
	if ok {
		return "MET"
	}
	return "MISSED"
}

// row: the rate is successful cycles over the wall time of all cycles.
func (acc *turnCycleAcc) row() turnAllocRow {
	fails := 0
	for _, n := range acc.errs {
		fails += n
	}
	row := turnAllocRow{Cycles: len(acc.ok) + fails, Failures: fails, ServerCPUs: r2(acc.cpu.Seconds()), Errors: acc.errs}
	if acc.wall > 0 {
		row.PerSec = r1(float64(len(acc.ok)) / acc.wall.Seconds())
	}
	if len(acc.ok) > 0 {
		row.P50Ms, row.P95Ms = percentiles(acc.ok)
		row.MaxMs = float64(slices.Max(acc.ok).Microseconds()) / 1000
	}
	return row
}

func printTurn(r *turnReport) {
	fmt.Printf("\nTURN relay — turnd vs coturn on loopback, %s (%s)\n", r.Machine, r.When.Format(time.RFC3339))
	fmt.Printf("  turnd:  %s\n  coturn: %s\n  load sender: %s\n\n", r.Turnd, r.Coturn, r.Sender)
	fmt.Printf("  %-9s %-7s %12s %12s %9s %9s %8s %7s %6s %s\n", "target/s", "server", "sent pkt/s", "deliv pkt/s", "Mbit/s", "loss %", "srv CPU%", "µs/pkt", "ratio", "worst alloc loss %")
	for _, row := range r.Rates {
		for _, s := range []struct {
			name string
			v    turnSide
		}{{"turnd", row.Turnd}, {"coturn", row.Coturn}} {
			ratio := ""
			if s.name == "turnd" {
				ratio = fmt.Sprintf("%.2f", row.Ratio)
			}
			worst := 0.0
			for _, l := range s.v.PerAllocLoss {
				worst = max(worst, l)
			}
			extra := ""
			if s.v.Skipped > 0 || s.v.SendErrors > 0 {
				extra = fmt.Sprintf("  (sender skipped %d, send errors %d)", s.v.Skipped, s.v.SendErrors)
			}
			fmt.Printf("  %-9d %-7s %12.0f %12.0f %9.1f %9.2f %8.1f %7.1f %6s %.2f%s\n", row.TargetPerSec, s.name, s.v.SentPerSec, s.v.DeliveredPerSec, s.v.Mbps, s.v.LossPercent, s.v.ServerCPU, s.v.CPUPerPkt, ratio, worst, extra)
		}
	}
	fmt.Printf("\n  allocate+close, %d cycles each (ratio turnd/coturn %.2f):\n", turnCycles, r.AllocRatio)
	for _, x := range []struct {
		name string
		v    turnAllocRow
	}{{"turnd", r.AllocTurnd}, {"coturn", r.AllocCoturn}} {
		fmt.Printf("    %-7s %6.0f/s  cycle p50 %.1f ms, p95 %.1f ms, max %.1f ms, %d failed, server CPU %.2f s\n",
			x.name, x.v.PerSec, x.v.P50Ms, x.v.P95Ms, x.v.MaxMs, x.v.Failures, x.v.ServerCPUs)
		for e, n := range x.v.Errors {
			fmt.Printf("            %d× %s\n", n, e)
		}
	}
	for _, c := range r.Checks {
		fmt.Println("  " + c)
	}
	fmt.Printf("  load average before %s, after %s; %.1f s\n\n", r.LoadBefore, r.LoadAfter, r.WallSeconds)
}
