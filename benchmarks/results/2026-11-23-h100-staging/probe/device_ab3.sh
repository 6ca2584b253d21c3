python3 -m pip install -q --no-index --no-deps --target /tmp/site_p wheels_prev/*.whl
python3 -m pip install -q --no-index --no-deps --target /tmp/site_n wheels/amso-*.whl
for i in 1 2 3 4; do for s in p n; do PYTHONPATH=/tmp/site_$s python3 scratch/ab.py $s; done; done 2>&1 | tee $OUT/ab_hostalloc.txt
python3 -m pip install -q --no-index --no-deps --target /tmp/site wheels_extra/apache_tvm_ffi*.whl
mkdir -p $OUT/suite; OUT=$OUT/suite bash scripts/gpu_suite.sh pytest > /dev/null 2>&1; echo "pytest rc $?"; OUT=$OUT/suite bash scripts/gpu_suite.sh sanitizer > /dev/null 2>&1; echo "sanitizer rc $?"
tail -1 $OUT/suite/pytest.log; tail -1 $OUT/suite/rust_cuda.log; tail -1 $OUT/suite/memcheck.log; tail -1 $OUT/suite/racecheck.log
PYTHONPATH=/tmp/site python3 benchmarks/run.py --out $OUT/r7 > $OUT/r7.log 2>&1; echo "report rc $?"; rm -f $OUT/r7/report.md
cd $OUT && tar czf suite.tgz suite && rm -rf suite
