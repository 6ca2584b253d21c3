python3 -m pip install -q --no-index --no-deps --target /tmp/site_p wheels_prev/*.whl
python3 -m pip install -q --no-index --no-deps --target /tmp/site_f wheels/amso-*.whl
for i in 1 2 3 4; do for s in p f; do PYTHONPATH=/tmp/site_$s python3 scratch/ab.py $s; done; done 2>&1 | tee $OUT/ab_prev_final.txt
