// node-redlock beside `fencelock bench`, on the same nodes through the same delaying proxies
// (issue 18's asymmetric-latency goal; docs/performance.md, "Nodes at different distances").
// Not part of the crates, and no test runs it. Needs Node and, in this folder or above it:
//   npm install redlock@5.0.0-beta.2 ioredis
// node node_redlock.js proxy LISTEN:TARGET[,LISTEN:TARGET...] DELAY_MS
//     TCP proxies on loopback that pass requests at once and hold each reply DELAY_MS
//     (Node's timers of one duration fire in the order they were set: replies stay in order)
// node node_redlock.js seq PORT,PORT,... CYCLES
//     node-redlock 5 (retryCount 0), CYCLES sequential acquire+release of one resource,
//     TTL 10 s; prints cycles/s and p50/p99
const net = require('net');
const mode = process.argv[2];
if (mode === 'proxy') {
  const delay = Number(process.argv[4]);
  for (const pair of process.argv[3].split(',')) {
    const [listen, target] = pair.split(':').map(Number);
    net.createServer((c) => {
      c.setNoDelay(true);
      const u = net.connect(target, '127.0.0.1');
      u.setNoDelay(true);
      c.on('data', (d) => u.write(d));
      u.on('data', (d) => setTimeout(() => c.write(d), delay));
      const end = () => { c.destroy(); u.destroy(); };
      c.on('error', end); u.on('error', end); c.on('close', end); u.on('close', end);
    }).listen(listen, '127.0.0.1');
  }
  console.log('proxies up');
} else if (mode === 'seq') {
  const Redis = require('ioredis');
  const Redlock = require('redlock').default;
  const ports = process.argv[3].split(',').map(Number);
  const cycles = Number(process.argv[4]);
  const clients = ports.map((p) => new Redis({ port: p, host: '127.0.0.1', enableAutoPipelining: false }));
  const redlock = new Redlock(clients, { retryCount: 0, automaticExtensionThreshold: 500 });
  redlock.on('error', () => {});
  (async () => {
    await Promise.all(clients.map((c) => c.ping()));
    const lat = [];
    let errors = 0;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < cycles; i++) {
      const s = process.hrtime.bigint();
      try {
        const lock = await redlock.acquire(['nodebench:seq'], 10000);
        await lock.release();
      } catch (e) { errors++; }
      lat.push(Number(process.hrtime.bigint() - s) / 1e6);
    }
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    lat.sort((a, b) => a - b);
    const q = (f) => lat[Math.min(lat.length - 1, Math.floor(f * lat.length))].toFixed(2);
    console.log(`node-redlock seq: ${(cycles / secs).toFixed(0)} cycles/s, p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, errors ${errors}`);
    clients.forEach((c) => c.disconnect());
  })();
}
