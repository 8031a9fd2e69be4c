# Plot a run's metrics by hand: the same four panels as `trainrun report` (which needs nothing
# but gnuplot), for when you want to tweak the picture. Reads RUN_DIR/metrics.jsonl through jq.
#
#   gnuplot -e "run='runs/quickstart'" scripts/plot-metrics.gp      # writes runs/quickstart/plot.png
#   gnuplot -e "run='runs/quickstart'; out='x.png'" scripts/plot-metrics.gp
if (!exists("run")) { print "usage: gnuplot -e \"run='RUN_DIR'\" scripts/plot-metrics.gp"; exit }
if (!exists("out")) { out = run . "/plot.png" }
jsonl = run . "/metrics.jsonl"
col(kind, fields) = sprintf("< jq -r 'select(.kind==\"%s\") | [%s] | map(. // \"?\") | @tsv' '%s'", kind, fields, jsonl)
train = col("train", ".step,.loss,.lr,.tokens_per_sec,.grad_norm,.mfu")
evals = col("eval", ".step,.val_loss")

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1400,900 noenhanced font ",10"
} else {
  set terminal png size 1400,900 noenhanced
}
set output out
set datafile separator "\t"
set datafile missing "?"
set key top right
set grid
set multiplot layout 2,2 title "trainrun " . run
set xlabel "step"
set title "loss"
plot train using 1:2 with lines title "train", evals using 1:2 with linespoints title "val"
set title "learning rate"
plot train using 1:3 with lines notitle
set title "tokens/s"
plot train using 1:4 with lines notitle
set title "grad norm and MFU"
set ytics nomirror
set y2tics
set ylabel "grad norm"
set y2label "MFU %"
plot train using 1:5 with lines title "grad norm" axes x1y1, \
     train using 1:($6*100) with lines title "MFU %" axes x1y2
unset multiplot
print "wrote " . out
