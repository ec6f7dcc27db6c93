// One client of the original fero (the npm package, pinned by the Go
// side), for fero-bench: it runs one client's share of a trial itself and
// reports what it measured, so that no bridge sits between the original's
// client and its socket.
//
// argv[2] is JSON: { host, port, scenario, size, records, warmupRecords,
// window, count, warmupCount, progressMs, stallMs }. The script joins the
// resource "fero-bench" as a client node of the server at host:port, and
// talks to the Go side in lines:
//
//   out "connected"        the client node is connected to its server
//   out "ready"            the warm-up is done; waiting for "go"
//   in  "go"               start now (the Go side waits for the trial's
//                          common start instant)
//   out "p <n>"            progress: measured operations completed
//   out "l <ns> <ns> ..."  round trip latencies, in nanoseconds
//   out "r <json>"         the result: milestones in ns from the start
//   out "e <message>"      a failure; the script then exits with status 1
//
// Every record is cache.update(key, value): an UPDATE change record sent
// to the server, whose default handler appends, applies, commits it back
// to this client (whose copy applies it) and replies. Keys are "k0" …
// "k9999", cycling, as in fero's own adapter (bench/ferosut); the value is
// a string of size bytes. The milestones are the original's own, counted
// as its benchmark (tests/integration/speed/sync) counts them: "tack"
// events (the outbox flushed to the socket), "ack" events (the server's
// count of the requests it has received) and "reply" events.
'use strict'

const spec = JSON.parse(process.argv[2])
const fero = require('fero')

const KEYS = 10000
const keys = Array.from({ length: KEYS }, (_, i) => `k${i}`)
const value = 'x'.repeat(spec.size)
const now = () => process.hrtime.bigint()
const out = line => process.stdout.write(line + '\n')
const fail = message => {
  out(`e ${String(message).replace(/\n/g, ' ')}`)
  process.exit(1)
}

let resource // the client node
let next = 0 // records written, which picks the next key
let sent = 0 // records handed to the client node, warm-up included
let replies = 0 // replies received, warm-up included
// The handlers of the phase running; each event handler is set once.
let onTack = null
let onAck = null
let onReply = null
// Measured operations completed, for progress and the stall check.
let completed = 0

const send = () => {
  if (!resource.update(keys[next++ % KEYS], value)) fail('the client node is not connected to its server')
  sent++
}

// oneway sends n records back to back: tacks when the last is handed to
// the socket, yacks when the server's count of received requests reaches
// every one sent.
const oneway = n => new Promise(resolve => {
  const t0 = now()
  const target = sent + n
  let tacks = 0n
  let yacks = 0n
  const finish = () => tacks && yacks && resolve({ tacks: Number(tacks - t0), yacks: Number(yacks - t0) })
  onTack = v => { if (!tacks && v >= target) { tacks = now(); finish() } }
  onAck = v => {
    completed = v - (target - n)
    if (!yacks && v >= target) { yacks = now(); finish() }
  }
  for (let i = 0; i < n; i++) send()
})

// reqreply sends n requests keeping at most window in flight: tacks when
// the last is handed to the socket, sacks when every reply is back.
const reqreply = (n, window) => new Promise(resolve => {
  const t0 = now()
  const target = sent + n
  let issued = 0
  let replied = 0
  let tacks = 0n
  let sacks = 0n
  const finish = () => tacks && sacks && resolve({ tacks: Number(tacks - t0), sacks: Number(sacks - t0) })
  const pump = () => {
    for (; issued < n && issued - replied < window; issued++) send()
  }
  onTack = v => { if (!tacks && v >= target) { tacks = now(); finish() } }
  onReply = () => {
    completed = ++replied
    if (replied === n) { sacks = now(); finish() } else pump()
  }
  pump()
})

// roundtrip times count sequential requests, each sent once the reply to
// the one before is back, reporting every latency unless warm.
const roundtrip = (count, report) => new Promise(resolve => {
  const t0 = now()
  let batch = []
  let done = 0
  let t = now()
  onReply = () => {
    const d = now() - t
    completed = ++done
    if (report) {
      batch.push(d)
      if (batch.length === 1000) { out(`l ${batch.join(' ')}`); batch = [] }
    }
    if (done < count) { t = now(); send() } else {
      if (batch.length) out(`l ${batch.join(' ')}`)
      resolve({ window: Number(now() - t0) })
    }
  }
  if (count === 0) return resolve({ window: 0 })
  send()
})

// check writes one record and waits for its reply, then checks that the
// default handler committed it back to this client's copy, so that a
// setup in which the records take another path fails rather than measures.
const check = () => new Promise(resolve => {
  const key = keys[next % KEYS]
  onReply = () => {
    onReply = null
    if (resource[key] !== value) fail(`the reply came, but the commit of ${key} did not reach the client's copy`)
    resolve()
  }
  send()
})

// drained waits until every request sent has its reply: the original
// answers every record, one-way ones too, and the warm-up's answers must
// not arrive inside the measured window.
const drained = () => new Promise(resolve => {
  onReply = () => { completed = replies; if (replies >= sent) resolve() }
  onReply()
})

const run = (warm) => {
  const n = warm ? spec.warmupRecords : spec.records
  switch (spec.scenario) {
    case 'oneway': return n ? oneway(n) : Promise.resolve()
    case 'reqreply': return n ? reqreply(n, spec.window) : Promise.resolve()
    case 'roundtrip': return roundtrip(warm ? spec.warmupCount : spec.count, !warm)
  }
  fail(`unsupported scenario ${spec.scenario}`)
}

// watch fails the client if nothing completes for stallMs while it waits
// (the original drops a request its handler refuses, without a reply), and
// reports progress every progressMs if measured.
const watch = measured => {
  let last = -1
  let since = Date.now()
  return setInterval(() => {
    if (measured && spec.progressMs) out(`p ${completed}`)
    if (completed !== last) { last = completed; since = Date.now() }
    else if (Date.now() - since > spec.stallMs) fail(`nothing completed for ${spec.stallMs} ms (${completed} done)`)
  }, spec.progressMs || 1000)
}

const connected = r => r.peers.lists.connected.length > 0
  ? Promise.resolve()
  : new Promise(resolve => {
    const timeout = setTimeout(() => fail(`not connected to ${spec.host}:${spec.port} within 30 s`), 30000)
    r.once('connected', () => { clearTimeout(timeout); resolve() })
  })

const lines = () => {
  let buf = ''
  const waiting = []
  const queued = []
  process.stdin.setEncoding('utf8')
  process.stdin.on('data', d => {
    buf += d
    let i
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i)
      buf = buf.slice(i + 1)
      if (waiting.length) waiting.shift()(line)
      else queued.push(line)
    }
  })
  // The Go side went away: stop.
  process.stdin.on('end', () => process.exit(2))
  return () => queued.length ? Promise.resolve(queued.shift()) : new Promise(resolve => waiting.push(resolve))
}

const main = async () => {
  const nextLine = lines()
  resource = await fero('fero-bench', { client: true, hosts: [spec.host], ports: [spec.port], multicast: false })
  resource.on('tack', m => onTack && onTack(m.value))
  resource.on('ack', m => onAck && onAck(m.value))
  resource.on('reply', () => { replies++; onReply && onReply() })
  await connected(resource)
  out('connected')
  await check()
  const warmWatch = watch(false)
  await run(true)
  await drained()
  clearInterval(warmWatch)
  onTack = onAck = onReply = null
  completed = 0
  out('ready')
  const go = await nextLine()
  if (go !== 'go') fail(`want "go", got ${JSON.stringify(go)}`)
  const measuring = watch(true)
  const result = await run(false)
  clearInterval(measuring)
  process.stdout.write(`r ${JSON.stringify(result)}\n`, () => process.exit(0))
}

main().catch(e => fail(e && e.stack || e))
