#!/usr/bin/env node
// A kafkajs producer and a kafkajs group consumer running side by side, for
// tests/faults/test_cluster_clients.py (a 3-broker cluster, brokers stopped and started
// while this runs).
//
// Plan in argv[2]:
//   {"brokers": ["127.0.0.1:P1", ...], "topic": "t", "partitions": 3, "group": "g",
//    "name": "js", "count": 300 | null, "chunk": 30, "intervalMs": 10}
//
// The producer (idempotent, acks=-1, retrying for ever as kafkajs' idempotent producer
// does) sends the values "<name>-<seq>", seq = 0, 1, ..., to partition seq % partitions,
// "chunk" records a step: one send() per partition (see below why), the partitions'
// send()s at the same time, the next step when they are all answered and "intervalMs"
// has passed. It stops after "count" records, or (count null) when stdin says
// "stop-producing". The consumer (a member of "group", from the beginning, kafkajs'
// auto commit) runs meanwhile.
//
// stdout, one JSON object a line:
//   {"e": "acked", "v": value, "p": partition, "o": offset}   acknowledged by the cluster
//   {"e": "failed", "v": value, "error": "..."}                a send() that failed
//   {"e": "produced", "sent": N}                               the producer is done
//   {"e": "rec", "v": value, "p": partition, "o": offset}      given to the consumer
//   {"e": "crash", "error": "..."}                             the consumer crashed
//   {"e": "closed"}                                            everything disconnected
// kafkajs' log goes to stderr as JSON lines. When stdin closes: stop producing, then
// disconnect the consumer (it commits) and the producer, print "closed" and exit.
'use strict'

const readline = require('readline')
const { Kafka, Partitioners, logLevel } = require('kafkajs')

const plan = JSON.parse(process.argv[2])
const emit = event => process.stdout.write(JSON.stringify(event) + '\n')
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
const logCreator = () => ({ namespace, label, log }) => {
  process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
}

const kafka = new Kafka({
  clientId: `odradek-cluster-${plan.name}`,
  brokers: plan.brokers,
  logLevel: logLevel.WARN,
  logCreator,
  connectionTimeout: 3000,
  requestTimeout: 15000,
  retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: 30 },
})

let stopProducing = false

async function produce() {
  const producer = kafka.producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: false,
    idempotent: true,
    maxInFlightRequests: 1,
    metadataMaxAge: 1000,
    retry: { initialRetryTime: 100, maxRetryTime: 1000, retries: Number.MAX_SAFE_INTEGER },
  })
  await producer.connect()
  const chunk = plan.chunk || plan.partitions
  let seq = 0
  const send = async messages => {
    try {
      const metadata = await producer.send({ topic: plan.topic, acks: -1, messages })
      const [result] = metadata.filter(r => r.partition === messages[0].partition)
      if (metadata.length !== 1 || result === undefined || result.errorCode !== 0) {
        throw new Error(`send() answered ${JSON.stringify(metadata)}`)
      }
      // One batch: offsets from the base offset on, in the order given.
      messages.forEach((m, i) => {
        emit({ e: 'acked', v: m.value, p: m.partition, o: Number(result.baseOffset) + i })
      })
    } catch (err) {
      for (const m of messages) emit({ e: 'failed', v: m.value, error: `${err.name}: ${err.message}` })
    }
  }
  try {
    while (!stopProducing && (plan.count === null || seq < plan.count)) {
      const size = plan.count === null ? chunk : Math.min(chunk, plan.count - seq)
      const perPartition = new Map()
      for (let i = seq; i < seq + size; i++) {
        const partition = i % plan.partitions
        if (!perPartition.has(partition)) perPartition.set(partition, [])
        perPartition.get(partition).push({ value: `${plan.name}-${i}`, partition })
      }
      seq += size
      // One send() per partition, concurrently. One send() over partitions led by
      // different brokers loses acknowledged records in kafkajs 2.2.4 when a leader
      // moves: the old leader answers NOT_LEADER for partition P; if P's new leader is a
      // broker that already answered this send() for another partition, the retry skips
      // it (sendMessages.js keeps one response per broker), send() resolves without P,
      // and P's sequence numbers, rolled back, go to the next records. The first
      // attempt may have been written all the same (a leader that loses leadership
      // while waiting for acks=all answers NOT_LEADER, the outcome open), and then the
      // broker takes the next records for a retry of it (same producer id, epoch and
      // sequence) and acknowledges them with its offset: they are never written.
      await Promise.all(Array.from(perPartition.values()).map(messages => send(messages)))
      if (plan.intervalMs) await sleep(plan.intervalMs)
    }
  } finally {
    emit({ e: 'produced', sent: seq })
    await producer.disconnect()
  }
}

async function consume() {
  const consumer = kafka.consumer({
    groupId: plan.group,
    metadataMaxAge: 1000,
    sessionTimeout: 10000,
    heartbeatInterval: 500,
  })
  consumer.on(consumer.events.CRASH, event => {
    emit({ e: 'crash', error: `${event.payload.error.name}: ${event.payload.error.message}` })
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [plan.topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      emit({ e: 'rec', v: message.value.toString(), p: partition, o: Number(message.offset) })
    },
  })
  return consumer
}

async function main() {
  const input = readline.createInterface({ input: process.stdin })
  const closed = new Promise(resolve => input.on('close', resolve))
  input.on('line', line => {
    if (line.trim() === 'stop-producing') stopProducing = true
  })
  const consumer = await consume()
  const producing = produce().catch(err => {
    emit({ e: 'crash', error: `producer: ${err.name}: ${err.message}` })
  })
  await closed
  stopProducing = true
  await producing
  await consumer.disconnect()
  emit({ e: 'closed' })
}

main().catch(err => {
  emit({ e: 'crash', error: `${err.name}: ${err.message}` })
  process.exit(1)
})
