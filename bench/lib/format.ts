/** Number formatting and small statistics shared by the benches. */

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/** 12345.6 → "12,346". */
export function count(value: number): string {
  return Math.round(value).toLocaleString('en-US');
}

/** 0.8312 → "0.83×"; a target check asks for 3 digits, so 0.247 never reads as 0.25. */
export function ratio(value: number, digits = 2): string {
  return `${value.toFixed(digits)}×`;
}

export function ms(value: number): string {
  return `${value < 10 ? value.toFixed(2) : value.toFixed(1)} ms`;
}

/** The spread of repeated measurements, as "min–max". */
export function range(values: readonly number[]): string {
  return `${count(Math.min(...values))}–${count(Math.max(...values))}`;
}

export function sleep(milliseconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, milliseconds));
}
