// What V8's garbage collector did over a run's timed window, from its GC profiler (the heap's spaces before and
// after each collection). A scavenge costs what it copies: the young objects still alive, kept in the young
// generation or promoted to the old one. A consumer that holds each event until its checkpoint commits pays for every
// event it still holds at each scavenge; these figures show how much that is per event.
import { GCProfiler, type GCProfilerResult } from 'node:v8';

export interface GcStats {
  scavenges: number;
  /** the scavenges' pauses of the main thread, ms (their parallel work on V8's helper threads is not in it) */
  scavengeMs: number;
  /** bytes the scavenges copied: the survivors they kept young plus those they promoted */
  scavengedBytes: number;
  /** of scavengedBytes, the bytes promoted to the old generation */
  promotedBytes: number;
  fullCollections: number;
  fullCollectionMs: number;
}

type HeapAt = GCProfilerResult['statistics'][number]['afterGC'];

function spaceUsed(heap: HeapAt, space: string): number {
  return heap.heapSpaceStatistics.find((s) => s.spaceName === space)?.spaceUsedSize ?? 0;
}

/** Starts counting; the function it returns stops and sums what happened meanwhile. */
export function startGcStats(): () => GcStats {
  const profiler = new GCProfiler();
  profiler.start();
  return () => {
    const stats: GcStats = {
      scavenges: 0,
      scavengeMs: 0,
      scavengedBytes: 0,
      promotedBytes: 0,
      fullCollections: 0,
      fullCollectionMs: 0,
    };
    for (const entry of profiler.stop().statistics) {
      if (entry.gcType === 'Scavenge') {
        const promoted = Math.max(0, spaceUsed(entry.afterGC, 'old_space') - spaceUsed(entry.beforeGC, 'old_space'));
        stats.scavenges += 1;
        stats.scavengeMs += entry.cost / 1000;
        stats.promotedBytes += promoted;
        stats.scavengedBytes += spaceUsed(entry.afterGC, 'new_space') + promoted;
      } else if (entry.gcType === 'MarkSweepCompact') {
        stats.fullCollections += 1;
        stats.fullCollectionMs += entry.cost / 1000;
      }
    }
    return stats;
  };
}
