#!/usr/bin/env node
// A kafkajs client driven by the interop tests (tests/interop/test_kafkajs.py).
//
// Reads one JSON plan from stdin (or from argv[2] if given):
//   {"brokers": ["127.0.0.1:PORT"], "logLevel": "WARN",
//    "steps": [{"op": "createTopic", "topic": "t", "partitions": 2}, ...]}
// runs its steps in order and prints {"results": [...]} (one entry per step) as JSON on
// stdout. kafkajs' own log goes to stderr as JSON lines. On the first failing step it
// prints {"error": ..., "step": i, "results": [...]} and exits 1.
//
// Steps:
//   createTopic        {topic, partitions}            -> {created}
//   produce            {topic, codec, idempotent?, acks?, messages: [Message]}
//                                                      -> {records: RecordMetadata[]}
//                      or {..., sends: [[Message], ...]}: one producer, one send() each
//                                                      -> {sends: [RecordMetadata[], ...]}
//     Message: {key: str|null, value: str|null, partition?: int, timestamp?: ms,
//               headers?: {name: str | [str, ...]}}
//     codec: "none" | "gzip" | "snappy" | "lz4" ("zstd": no codec installs on Node 20)
//   offsets            {topic}                        -> fetchTopicOffsets()
//   offsetsByTimestamp {topic, timestamp}             -> fetchTopicOffsetsByTimestamp()
//   metadata           {topics}                       -> fetchTopicMetadata()
//   listTopics         {}                             -> listTopics()
//   deleteTopic        {topic}                        -> {deleted}
//   consumeGroup       {topic, groupId, count, timeoutMs?}
//                                                      -> {messages: [{partition, offset,
//                                                          key, value, headers, timestamp}]}
//     A group consumer (kafkajs has no other kind): needs FindCoordinator, JoinGroup, ...
//
// Optional security (tests/interop/test_sasl.py, test_tls.py): "ssl": {"ca": "/path/ca.pem"}
// (TLS, the broker's certificate checked against that CA; with "cert" and "key" PEM files
// too for mutual TLS), "sasl": {"mechanism":
// "plain"|"scram-sha-256"|"scram-sha-512", "username", "password"} or {"mechanism":
// "oauthbearer", "token"}.
'use strict'

const fs = require('fs')
const {
  Kafka, CompressionTypes, CompressionCodecs, Partitioners, logLevel,
} = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const LZ4Codec = require('kafkajs-lz4')

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD, // no codec registered: kafkajs refuses to produce
}

const stderrLogger = () => ({ namespace, level, label, log }) => {
  process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
}

const str = b => (b === null || b === undefined ? null : b.toString())

function fromMessage(partition, m) {
  const headers = {}
  for (const [name, value] of Object.entries(m.headers || {})) {
    headers[name] = Array.isArray(value) ? value.map(str) : str(value)
  }
  return { partition, offset: m.offset, key: str(m.key), value: str(m.value), headers,
    timestamp: m.timestamp }
}

async function consumeGroup(kafka, step) {
  const consumer = kafka.consumer({
    groupId: step.groupId,
    retry: { retries: 1, restartOnFailure: async () => false },
  })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [step.topic], fromBeginning: true })
    const messages = []
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(
        `timed out after ${step.timeoutMs || 20000} ms with ${messages.length} of ` +
        `${step.count} messages`)), step.timeoutMs || 20000)
      const fail = err => { clearTimeout(timer); reject(err) }
      consumer.on(consumer.events.CRASH, event => fail(event.payload.error))
      consumer.run({
        eachMessage: async ({ partition, message }) => {
          messages.push(fromMessage(partition, message))
          if (messages.length >= step.count) { clearTimeout(timer); resolve() }
        },
      }).catch(fail)
    })
    return { messages }
  } finally {
    await consumer.disconnect()
  }
}

function toMessage(m) {
  const out = {
    key: m.key === null || m.key === undefined ? null : m.key,
    value: m.value === undefined ? null : m.value,
  }
  if (m.partition !== undefined) out.partition = m.partition
  if (m.timestamp !== undefined) out.timestamp = String(m.timestamp)
  if (m.headers) out.headers = m.headers
  return out
}

async function runStep(kafka, admin, step) {
  switch (step.op) {
    case 'createTopic': {
      const created = await admin.createTopics({
        topics: [{ topic: step.topic, numPartitions: step.partitions || 1 }],
        waitForLeaders: true,
      })
      return { created }
    }
    case 'produce': {
      if (!(step.codec in CODECS)) throw new Error(`unknown codec ${step.codec}`)
      const producer = kafka.producer({
        createPartitioner: Partitioners.DefaultPartitioner,
        allowAutoTopicCreation: false,
        idempotent: !!step.idempotent,
        maxInFlightRequests: step.idempotent ? 1 : undefined,
      })
      await producer.connect()
      try {
        const sends = []
        for (const messages of step.sends || [step.messages]) {
          sends.push(await producer.send({
            topic: step.topic,
            compression: CODECS[step.codec],
            acks: step.acks === undefined ? -1 : step.acks,
            messages: messages.map(toMessage),
          }))
        }
        return { records: sends[0], sends }
      } finally {
        await producer.disconnect()
      }
    }
    case 'offsets':
      return { partitions: await admin.fetchTopicOffsets(step.topic) }
    case 'offsetsByTimestamp':
      return {
        partitions: await admin.fetchTopicOffsetsByTimestamp(step.topic, step.timestamp),
      }
    case 'metadata':
      return await admin.fetchTopicMetadata({ topics: step.topics })
    case 'listTopics':
      return { topics: await admin.listTopics() }
    case 'deleteTopic':
      await admin.deleteTopics({ topics: [step.topic], timeout: 10000 })
      return { deleted: true }
    case 'consumeGroup':
      return await consumeGroup(kafka, step)
    default:
      throw new Error(`unknown op ${step.op}`)
  }
}

async function main() {
  const text = process.argv[2] !== undefined ? process.argv[2] : fs.readFileSync(0, 'utf8')
  const plan = JSON.parse(text)
  const kafka = new Kafka({
    clientId: 'odradek-interop-kafkajs',
    brokers: plan.brokers,
    logLevel: logLevel[plan.logLevel || 'WARN'],
    logCreator: stderrLogger,
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: plan.retries === undefined ? 2 : plan.retries },
    ssl: plan.ssl ? {
      ca: [fs.readFileSync(plan.ssl.ca, 'utf8')],
      // Mutual TLS: the client's certificate and key (PEM files).
      ...(plan.ssl.cert ? { cert: fs.readFileSync(plan.ssl.cert, 'utf8'),
                            key: fs.readFileSync(plan.ssl.key, 'utf8') } : {}),
    } : undefined,
    // OAUTHBEARER: the plan carries the token (a JWT the test signed).
    sasl: plan.sasl && plan.sasl.mechanism === 'oauthbearer'
      ? { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: plan.sasl.token }) }
      : plan.sasl,
  })
  const admin = kafka.admin()
  await admin.connect()
  const results = []
  let failed = null
  try {
    for (let i = 0; i < plan.steps.length; i++) {
      try {
        results.push(await runStep(kafka, admin, plan.steps[i]))
      } catch (err) {
        failed = { step: i, op: plan.steps[i].op, error: `${err.name}: ${err.message}`,
          type: err.type, retriable: err.retriable }
        break
      }
    }
  } finally {
    await admin.disconnect()
  }
  if (failed) {
    process.stdout.write(JSON.stringify({ ...failed, results }) + '\n')
    process.exitCode = 1
  } else {
    process.stdout.write(JSON.stringify({ results }) + '\n')
  }
}

main().catch(err => {
  process.stdout.write(JSON.stringify({ error: `${err.name}: ${err.message}` }) + '\n')
  process.exitCode = 1
})
