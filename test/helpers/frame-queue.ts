import type { FrameQueue, QueueItem } from '../../functions/link/frame-queue.js';

/** Everything the waiting side has received so far (without waiting), up to and with a failure (which stays). */
export async function received(queue: FrameQueue): Promise<QueueItem[]> {
  const items: QueueItem[] = [];
  for (;;) {
    const item = await queue.next(AbortSignal.abort());
    if (!item) return items;
    items.push(item);
    if (item.kind === 'failed') return items;
  }
}
